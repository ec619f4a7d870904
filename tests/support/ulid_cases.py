"""ULID test values and their oracle (python-ulid), shared by the UDF tests and the SQL
macro tests: every implementation must agree with python-ulid on the same edge cases."""

from __future__ import annotations

import uuid

import ulid as pyulid

GOOD = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
GOOD_RAW = bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b")


# -- the oracle ---------------------------------------------------------------------------


def oracle_to_string(value: bytes | None) -> str | None:
    if value is None or len(value) != 16:
        return None
    return str(pyulid.ULID(value))


def oracle_from_string(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return bytes(pyulid.ULID.from_str(value).bytes)
    except ValueError:
        return None


def oracle_timestamp_ms(value: bytes | None) -> int | None:
    if value is None or len(value) != 16:
        return None
    return int(pyulid.ULID(value).milliseconds)


def oracle_to_uuid(value: bytes | None) -> str | None:
    if value is None or len(value) != 16:
        return None
    return str(pyulid.ULID(value).to_uuid())


def oracle_from_uuid(value: str | None) -> bytes | None:
    # uuid.UUID also takes braces, URNs and no dashes; the canonical form is what we accept.
    if value is None or len(value) != 36 or [i for i, c in enumerate(value) if c == "-"] != [
        8, 13, 18, 23,
    ]:  # fmt: skip
        return None
    try:
        return uuid.UUID(value).bytes
    except ValueError:
        return None


def oracle_from_parts(high: bytes | None, low: int | None) -> bytes | None:
    if high is None or low is None or len(high) != 8:
        return None
    return high + low.to_bytes(8, "big", signed=True)


# -- edge cases ---------------------------------------------------------------------------

EDGE_BINARY: list[bytes | None] = [
    bytes(16),  # all zero
    b"\xff" * 16,  # all 0xFF: max timestamp and max randomness
    b"\xff" * 6 + bytes(10),  # max timestamp (year 10889)
    bytes(8) + b"\x80" + bytes(7),  # bit 63 of the low half
    GOOD_RAW,
    b"",
    b"\x01" * 15,
    b"\x01" * 17,
    b"\x00",
    None,
]

EDGE_TEXT: list[str | None] = [
    GOOD,
    GOOD.lower(),
    "01arZ3NDEKtsv4RRFFQ69G5FAV",  # mixed case
    "00000000000000000000000000",
    "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # the largest ULID
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # first char > '7': 129 bits
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    GOOD[:-1] + "I",
    GOOD[:-1] + "L",
    GOOD[:-1] + "O",
    GOOD[:-1] + "U",
    GOOD[:-1] + "u",
    GOOD[:-1] + "!",
    GOOD[:-1] + "é",  # 26 characters, 27 UTF-8 bytes
    GOOD[:-2] + "é",  # 25 characters, 26 UTF-8 bytes
    GOOD[:-1] + "\u017f",  # long s: upper-cases to 'S' in Java
    GOOD[:-1],
    GOOD + "0",
    GOOD + "\n",
    " " + GOOD[1:],
    "",
    None,
]

EDGE_UUID: list[str | None] = [
    "01563e3a-b5d3-d676-4c61-efb99302bd5b",
    "01563E3A-B5D3-D676-4C61-EFB99302BD5B",
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "01563e3ab5d3d6764c61efb99302bd5b",  # no dashes
    "01563e3a-b5d3-d676-4c61-efb99302bd5g",  # not hex
    "01563e3a_b5d3-d676-4c61-efb99302bd5b",  # dash missing
    "{01563e3a-b5d3-d676-4c61-efb99302bd}",
    "",
    None,
]

EDGE_PARTS: list[tuple[bytes | None, int | None]] = [
    (GOOD_RAW[:8], -1),
    (GOOD_RAW[:8], 0),
    (b"\xff" * 8, -(2**63)),
    (bytes(8), 2**63 - 1),
    (GOOD_RAW[:7], 1),
    (GOOD_RAW, 1),
    (None, 1),
    (GOOD_RAW[:8], None),
]


# -- Spark fixtures -----------------------------------------------------------------------
