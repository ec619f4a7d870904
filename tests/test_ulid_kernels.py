"""The numpy ULID kernels against python-ulid (the oracle) and the layout rules."""

from __future__ import annotations

import doctest
import importlib
import pickle
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from ulid import ULID

from changefeed import ulid as cu
from changefeed.ulid import _generate, _scratch

DOCS = Path(__file__).resolve().parents[1] / "docs" / "python-ulid.md"
MODULES = ["", "._codec", "._errors", "._layout", "._uuid", "._generate", "._scalar", ".arrow"]
ORACLE_ROWS = 100_000
CHUNK = _scratch.CHUNK_ROWS
# Rows that exercise every byte-level edge of the layout.
EDGES = [
    bytes(16),
    b"\xff" * 16,
    (2**48 - 1).to_bytes(6, "big") + bytes(10),  # max timestamp
    bytes(8) + b"\x80" + bytes(7),  # bit 63 of the low half: negative ulid_low
    bytes(8) + b"\x40" + bytes(7),  # bit 62 of the low half: the headroom bit
    bytes(7) + b"\x01" + bytes(8),  # lowest bit of the high half
    bytes(15) + b"\x01",
    b"\x80" + bytes(15),
    b"\x7f" + b"\xff" * 15,
    bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"),
]

kernel_settings = settings(max_examples=200, deadline=None)


def matrix(values: list[bytes], width: int) -> NDArray[np.uint8]:
    return np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), width)


def random_rows(n: int, seed: int = 0) -> NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, (n, 16), dtype=np.uint8)


def oracle_text(raw: NDArray[np.uint8]) -> list[str]:
    return [str(ULID.from_bytes(row.tobytes())) for row in raw]


def text_rows(text: NDArray[np.uint8]) -> list[str]:
    return [row.tobytes().decode("ascii") for row in text]


# --- documentation --------------------------------------------------------------------


def test_docs_examples_run() -> None:
    result = doctest.testfile(str(DOCS), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10
    assert result.failed == 0


@pytest.mark.parametrize("suffix", MODULES)
def test_module_doctests(suffix: str) -> None:
    module = importlib.import_module("changefeed.ulid" + suffix)
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0


# --- encode / decode ------------------------------------------------------------------


def test_encode_agrees_with_oracle_on_100k_random_values() -> None:
    raw = random_rows(ORACLE_ROWS, seed=1)
    text = cu.encode(raw)
    assert text.shape == (ORACLE_ROWS, 26)
    assert text_rows(text) == oracle_text(raw)


def test_decode_agrees_with_oracle_on_100k_random_values() -> None:
    raw = random_rows(ORACLE_ROWS, seed=2)
    strings = oracle_text(raw)
    strings[::2] = [s.lower() for s in strings[::2]]
    decoded = cu.decode(matrix([s.encode() for s in strings], 26))
    expected = [ULID.from_str(s).bytes for s in strings]
    assert [row.tobytes() for row in decoded] == expected
    np.testing.assert_array_equal(decoded, raw)


@pytest.mark.parametrize("value", EDGES, ids=lambda v: v.hex())
def test_edge_values_agree_with_oracle(value: bytes) -> None:
    text = cu.encode_one(value)
    assert text == str(ULID.from_bytes(value))
    assert cu.decode_one(text) == value
    assert cu.decode_one(text.lower()) == value


def test_extreme_values_have_known_text() -> None:
    assert cu.encode_one(bytes(16)) == "0" * 26
    assert cu.encode_one(b"\xff" * 16) == "7" + "Z" * 25
    assert cu.decode_one("7" + "z" * 25) == b"\xff" * 16


@pytest.mark.parametrize("n", [0, 1, 2, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 3])
def test_round_trip_across_chunk_boundaries(n: int) -> None:
    raw = random_rows(n, seed=n)
    text = cu.encode(raw)
    assert text.shape == (n, 26)
    np.testing.assert_array_equal(cu.decode(text), raw)
    if n:
        assert text[-1].tobytes().decode() == str(ULID.from_bytes(raw[-1].tobytes()))


def test_kernels_accept_non_contiguous_and_unaligned_rows() -> None:
    raw = random_rows(50, seed=3)
    expected = cu.encode(raw)
    strided = np.repeat(raw, 2, axis=0)[::2]
    fortran = np.asfortranarray(raw)
    unaligned = np.frombuffer(b"x" + raw.tobytes(), dtype=np.uint8)[1:].reshape(50, 16)
    for variant in (strided, fortran, unaligned):
        np.testing.assert_array_equal(cu.encode(variant), expected)
    odd_text = np.frombuffer(b"x" + expected.tobytes(), dtype=np.uint8)[1:].reshape(50, 26)
    np.testing.assert_array_equal(cu.decode(odd_text), raw)
    np.testing.assert_array_equal(cu.decode(np.asfortranarray(expected)), raw)


def test_concurrent_calls_do_not_share_work_buffers() -> None:
    # The kernels reuse per-thread scratch buffers; numpy releases the GIL inside them.
    batches = [random_rows(3 * CHUNK + 17 * seed, seed=seed) for seed in range(8)]

    def round_trip(raw: NDArray[np.uint8]) -> bool:
        return all(
            np.array_equal(cu.decode(cu.encode(raw)), raw)
            and np.array_equal(cu.from_uuid(cu.to_uuid(raw)), raw)
            for _ in range(3)
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(round_trip, batches))


@kernel_settings
@given(st.binary(min_size=16, max_size=16))
def test_any_16_bytes_round_trip_like_the_oracle(value: bytes) -> None:
    oracle = ULID.from_bytes(value)
    text = cu.encode_one(value)
    assert text == str(oracle)
    assert cu.decode_one(text) == value
    raw = matrix([value], 16)
    assert cu.timestamp_ms(raw).tolist() == [oracle.milliseconds]
    assert cu.to_uuid(raw).tobytes().decode() == str(oracle.to_uuid())
    assert cu.from_uuid(cu.to_uuid(raw)).tobytes() == value
    high, low = cu.to_parts(raw)
    assert high.tobytes() == value[:8]
    assert low.tolist() == [int.from_bytes(value[8:], "big", signed=True)]
    assert cu.from_parts(high, low).tobytes() == value


# Characters around and inside the alphabet, the excluded aliases and non-ASCII.
TEXT_CHARS = st.sampled_from(
    list("0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyz")
    + list("ILOUilou/:@[`{-_ \x00\x7f\xe9\u00ff")
)


@kernel_settings
@given(st.lists(TEXT_CHARS, min_size=24, max_size=28).map("".join))
def test_decode_accepts_exactly_what_the_oracle_accepts(text: str) -> None:
    try:
        expected: bytes | None = ULID.from_str(text).bytes
    except ValueError:
        expected = None
    try:
        got: bytes | None = cu.decode_one(text)
    except cu.InvalidULID as error:
        assert error.value == text
        assert error.reason == cu.text_reason(text)
        got = None
    assert got == expected
    if len(text) == 26 and text.isascii():
        raw, valid = cu.decode_valid(matrix([text.encode()], 26))
        assert valid.tolist() == [expected is not None]
        assert raw.tobytes() == (expected or bytes(16))


# --- invalid text ---------------------------------------------------------------------

VALID_TEXT = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
# Every class of byte that is not a base32 digit: aliases, ASCII neighbours of the
# digit and letter ranges, control, space, DEL and non-ASCII bytes.
INVALID_BYTES = b"ILOUilou" + b"/:@[`{" + b"\x00\x1f -\x7f\x80\xe9\xff"


@pytest.mark.parametrize("byte", list(INVALID_BYTES), ids=lambda b: f"0x{b:02x}")
@pytest.mark.parametrize("position", [0, 1, 12, 25])
def test_each_invalid_character_class_is_rejected_with_its_position(
    byte: int, position: int
) -> None:
    rows = [VALID_TEXT.encode()] * 4
    bad = bytearray(rows[2])
    bad[position] = byte
    rows[2] = bytes(bad)
    text = matrix(rows, 26)
    raw, valid = cu.decode_valid(text)
    assert valid.tolist() == [True, True, False, True]
    assert not raw[2].any()
    assert raw[3].tobytes() == ULID.from_str(VALID_TEXT).bytes
    with pytest.raises(cu.InvalidULID) as caught:
        cu.decode(text)
    error = caught.value
    assert (error.index, error.value) == (2, bytes(bad))
    shown = repr(bytes([byte]))[1:]
    assert f"row 2: {bytes(bad)!r} is not a valid ULID" in str(error)
    assert f"invalid character {shown} at position {position}" in str(error)
    assert isinstance(error, ValueError)
    if chr(byte) in "ILOUilou":
        assert "Crockford aliases" in str(error)


@pytest.mark.parametrize("first", list("89ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyz"))
def test_first_character_above_7_overflows(first: str) -> None:
    text = first + VALID_TEXT[1:]
    with pytest.raises(ValueError, match="overflow"):
        ULID.from_str(text)
    with pytest.raises(cu.InvalidULID, match=f"first character '{first}' > '7' overflows 128"):
        cu.decode_one(text)
    _, valid = cu.decode_valid(matrix([text.encode(), VALID_TEXT.encode()], 26))
    assert valid.tolist() == [False, True]


def test_first_character_up_to_7_does_not_overflow() -> None:
    for first in "01234567":
        assert cu.decode_one(first + "Z" * 25)[0] >> 5 == int(first)


def test_invalid_ulid_survives_pickling() -> None:
    error = cu.InvalidULID(4, b"x", "wrong length 1, expected 26 characters", kind="UUID")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cu.InvalidULID
    assert (copy.index, copy.value, copy.reason, copy.kind) == (4, b"x", error.reason, "UUID")
    assert str(copy) == str(error)


def test_decode_reports_the_first_invalid_row() -> None:
    rows = [VALID_TEXT.encode()] * 5
    rows[1] = b"8" + rows[1][1:]
    rows[3] = rows[3][:-1] + b"U"
    with pytest.raises(cu.InvalidULID) as caught:
        cu.decode(matrix(rows, 26))
    assert caught.value.index == 1
    assert "overflows 128 bits" in caught.value.reason


@pytest.mark.parametrize("text", ["", "0", VALID_TEXT[:-1], VALID_TEXT + "0", VALID_TEXT * 2])
def test_decode_one_rejects_wrong_lengths(text: str) -> None:
    with pytest.raises(cu.InvalidULID, match=f"wrong length {len(text)}, expected 26") as caught:
        cu.decode_one(text, index=9)
    assert (caught.value.index, caught.value.value) == (9, text)


@pytest.mark.parametrize("value", [b"01ARZ3NDEKTSV4RRFFQ69G5FAV", None, 42, ["0"] * 26])
def test_decode_one_rejects_non_str(value: object) -> None:
    with pytest.raises(TypeError, match="decode_one\\(\\) expects str, got"):
        cu.decode_one(value)  # type: ignore[arg-type]


def test_encode_one_checks_type_and_length() -> None:
    with pytest.raises(TypeError, match="expects bytes, got str"):
        cu.encode_one(VALID_TEXT)  # type: ignore[arg-type]
    for size in (0, 15, 17):
        with pytest.raises(cu.InvalidULID, match=f"wrong length {size}, expected 16 bytes"):
            cu.encode_one(bytes(size))
    assert cu.encode_one(bytearray(16)) == "0" * 26


@pytest.mark.parametrize(
    ("call", "array", "error", "message"),
    [
        (cu.encode, [[0] * 16], TypeError, "expects raw as a numpy uint8 array"),
        (cu.encode, np.zeros((2, 16), np.int64), TypeError, "dtype uint8, got int64"),
        (cu.encode, np.zeros((2, 15), np.uint8), ValueError, r"shape \(n, 16\), got shape"),
        (cu.encode, np.zeros(16, np.uint8), ValueError, r"got shape \(16,\)"),
        (cu.decode, np.zeros((2, 16), np.uint8), ValueError, r"shape \(n, 26\)"),
        (cu.decode_valid, np.zeros((2, 27), np.uint8), ValueError, r"shape \(n, 26\)"),
        (cu.from_uuid, np.zeros((2, 26), np.uint8), ValueError, r"shape \(n, 36\)"),
        (cu.to_uuid, np.zeros((2, 26), np.uint8), ValueError, r"shape \(n, 16\)"),
        (cu.order_keys, np.zeros((2, 8), np.uint8), ValueError, r"shape \(n, 16\)"),
        (cu.timestamp_ms, "x", TypeError, "got str"),
    ],
)
def test_array_functions_check_their_input(
    call: object, array: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call(array)  # type: ignore[operator]


def test_empty_batches() -> None:
    empty = np.zeros((0, 16), np.uint8)
    assert cu.encode(empty).shape == (0, 26)
    raw, valid = cu.decode_valid(np.zeros((0, 26), np.uint8))
    assert raw.shape == (0, 16)
    assert valid.shape == (0,)
    assert cu.to_uuid(empty).shape == (0, 36)
    assert cu.from_uuid(np.zeros((0, 36), np.uint8)).shape == (0, 16)
    assert cu.timestamp_ms(empty).shape == (0,)
    assert cu.generate(0).shape == (0, 16)


# --- layout -----------------------------------------------------------------------------


def test_timestamps_agree_with_oracle() -> None:
    raw = np.concatenate([random_rows(1000, seed=4), matrix(EDGES, 16)])
    millis = [ULID.from_bytes(row.tobytes()).milliseconds for row in raw]
    assert cu.timestamp_ms(raw).dtype == np.int64
    assert cu.timestamp_ms(raw).tolist() == millis
    stamps = cu.timestamp(raw)
    assert stamps.dtype == np.dtype("datetime64[ms]")
    assert stamps.astype(np.int64).tolist() == millis
    assert cu.timestamp_ms(matrix([EDGES[2]], 16)).tolist() == [cu.MAX_TIMESTAMP_MS]
    oracle = ULID.from_str(VALID_TEXT).datetime.replace(tzinfo=None)
    assert cu.timestamp(matrix([cu.decode_one(VALID_TEXT)], 16))[0].item() == oracle


def test_parts_round_trip_including_negative_lows() -> None:
    raw = np.concatenate([random_rows(5000, seed=5), matrix(EDGES, 16)])
    high, low = cu.to_parts(raw)
    assert high.shape == (len(raw), 8)
    assert low.dtype == np.int64
    assert (low < 0).any()
    assert (low > 0).any()
    np.testing.assert_array_equal(cu.from_parts(high, low), raw)
    expected = [int.from_bytes(row.tobytes()[8:], "big", signed=True) for row in raw]
    assert low.tolist() == expected


def test_from_parts_builds_the_documented_layout() -> None:
    high = np.tile(np.arange(8, dtype=np.uint8), (4, 1))
    low = np.array([0, -1, -(2**63), 2**63 - 1], dtype=np.int64)
    raw = cu.from_parts(high, low)
    for row, value in zip(raw, low.tolist(), strict=True):
        assert row.tobytes() == bytes(range(8)) + value.to_bytes(8, "big", signed=True)
    big_endian = low.astype(">i8")
    np.testing.assert_array_equal(cu.from_parts(high, big_endian), raw)


def test_from_parts_checks_its_input() -> None:
    high = np.zeros((3, 8), np.uint8)
    with pytest.raises(ValueError, match=r"low of shape \(3,\), got shape \(2,\)"):
        cu.from_parts(high, np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="low of dtype int64, got int32"):
        cu.from_parts(high, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"high of shape \(n, 8\)"):
        cu.from_parts(np.zeros((3, 16), np.uint8), np.zeros(3, np.int64))


def test_order_keys_sort_like_the_bytes() -> None:
    raw = np.concatenate([random_rows(20_000, seed=6), matrix(EDGES, 16)])
    # Share prefixes so the second key decides many comparisons.
    raw[:5000, :8] = raw[0, :8]
    first, second = cu.order_keys(raw)
    assert first.dtype == second.dtype == np.int64
    by_keys = np.lexsort((second, first))
    by_bytes = sorted(range(len(raw)), key=lambda i: raw[i].tobytes())
    assert [raw[i].tobytes() for i in by_keys] == [raw[i].tobytes() for i in by_bytes]


@kernel_settings
@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16))
def test_order_keys_compare_like_the_bytes(a: bytes, b: bytes) -> None:
    first, second = cu.order_keys(matrix([a, b], 16))
    assert ((first[0], second[0]) < (first[1], second[1])) == (a < b)
    assert ((first[0], second[0]) == (first[1], second[1])) == (a == b)


# --- UUID text --------------------------------------------------------------------------


def test_uuid_text_agrees_with_oracle() -> None:
    raw = np.concatenate([random_rows(2000, seed=7), matrix(EDGES, 16)])
    text = cu.to_uuid(raw)
    expected = [str(ULID.from_bytes(row.tobytes()).to_uuid()) for row in raw]
    assert text_rows(text) == expected
    upper = matrix([s.upper().encode() for s in expected], 36)
    np.testing.assert_array_equal(cu.from_uuid(upper), raw)
    assert [uuid.UUID(s).bytes for s in expected] == [row.tobytes() for row in raw]


GOOD_UUID = "01563e3a-b5d3-d676-4c61-efb99302bd5b"


@pytest.mark.parametrize(
    ("position", "char", "reason"),
    [
        (8, "0", "expected '-' at position 8, found '0'"),
        (23, "_", "expected '-' at position 23, found '_'"),
        (0, "-", "invalid hex character '-' at position 0"),
        (35, "g", "invalid hex character 'g' at position 35"),
        (14, "G", "invalid hex character 'G' at position 14"),
        (9, " ", "invalid hex character ' ' at position 9"),
        (20, "\xff", "invalid hex character '\\xff' at position 20"),
    ],
)
def test_from_uuid_rejects_bad_dashes_and_hex(position: int, char: str, reason: str) -> None:
    bad = bytearray(GOOD_UUID.encode())
    bad[position] = ord(char)
    text = matrix([GOOD_UUID.encode(), bytes(bad)], 36)
    raw, valid = cu.from_uuid_valid(text)
    assert valid.tolist() == [True, False]
    assert not raw[1].any()
    assert raw[0].tobytes() == uuid.UUID(GOOD_UUID).bytes
    with pytest.raises(cu.InvalidULID) as caught:
        cu.from_uuid(text)
    assert (caught.value.index, caught.value.value) == (1, bytes(bad))
    assert caught.value.reason == reason
    assert "is not a valid UUID" in str(caught.value)


def test_uuid_reason_on_str() -> None:
    assert cu.uuid_reason(GOOD_UUID.upper()) is None
    assert cu.uuid_reason(GOOD_UUID[:-1]) == "wrong length 35, expected 36 characters"
    assert cu.uuid_reason(GOOD_UUID.replace("-", "")) == "wrong length 32, expected 36 characters"


# --- generation -------------------------------------------------------------------------


def test_generate_rows_increase_and_share_one_timestamp() -> None:
    before = time.time_ns() // 1_000_000
    raw = cu.generate(10_000)
    after = time.time_ns() // 1_000_000
    millis = cu.timestamp_ms(raw)
    assert raw.shape == (10_000, 16)
    assert (millis == millis[0]).all()
    assert before <= millis[0] <= after
    high, low = cu.to_parts(raw)
    assert (high == high[0]).all()
    assert (np.diff(low) == 1).all()
    assert not int(low[0]) >> cu.LOW_HEADROOM_BIT & 1
    as_bytes = [row.tobytes() for row in raw]
    assert as_bytes == sorted(set(as_bytes))


def test_generate_headroom_survives_the_worst_random_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_generate.os, "urandom", lambda size: b"\xff" * size)
    raw = cu.generate(1000, timestamp_ms=cu.MAX_TIMESTAMP_MS)
    high, low = cu.to_parts(raw)
    assert high[0].tobytes() == b"\xff" * 8
    assert int(low[0]) == int.from_bytes(b"\xbf" + b"\xff" * 7, "big", signed=True)
    # The run carries into bit 62 but never into bit 63: no sign flip, no byte wrap.
    assert (low < 0).all()
    assert (np.diff(low) == 1).all()
    as_bytes = [row.tobytes() for row in raw]
    assert as_bytes == sorted(as_bytes)
    assert len(set(as_bytes)) == 1000
    encoded = text_rows(cu.encode(raw))
    assert encoded == sorted(encoded)


def test_generate_is_reproducible_with_an_rng_and_clears_bit_62() -> None:
    a = cu.generate(5, timestamp_ms=1, rng=np.random.default_rng(11))
    b = cu.generate(5, timestamp_ms=1, rng=np.random.default_rng(11))
    np.testing.assert_array_equal(a, b)
    assert cu.timestamp_ms(a).tolist() == [1] * 5
    starts = [cu.to_parts(cu.generate(1, rng=np.random.default_rng(s)))[1][0] for s in range(64)]
    assert all(not int(x) >> 62 & 1 for x in starts)
    # bit 63 stays random (both signs occur), so only the headroom bit is spent.
    assert {int(x) < 0 for x in starts} == {True, False}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": -1}, ValueError, "0 <= n <= 4611686018427387904, got -1"),
        ({"n": 2**62 + 1}, ValueError, "n <= 4611686018427387904"),
        ({"n": 1.0}, TypeError, "n as int, got float"),
        ({"n": True}, TypeError, "n as int, got bool"),
        ({"n": 1, "timestamp_ms": -1}, ValueError, "0 <= timestamp_ms <= 281474976710655"),
        ({"n": 1, "timestamp_ms": 2**48}, ValueError, "got 281474976710656"),
        ({"n": 1, "timestamp_ms": 1.5}, TypeError, "timestamp_ms as int, got float"),
        ({"n": 1, "rng": 42}, TypeError, "rng as numpy.random.Generator, got int"),
    ],
)
def test_generate_checks_its_arguments(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        cu.generate(**kwargs)  # type: ignore[arg-type]


def test_generate_accepts_the_timestamp_limits() -> None:
    assert cu.timestamp_ms(cu.generate(1, timestamp_ms=0)).tolist() == [0]
    top = cu.generate(2, timestamp_ms=np.int64(cu.MAX_TIMESTAMP_MS))  # type: ignore[arg-type]
    assert cu.timestamp_ms(top).tolist() == [cu.MAX_TIMESTAMP_MS] * 2
    assert str(cu.timestamp(top)[0]) == "10889-08-02T05:31:50.655"


# --- scalar helpers -------------------------------------------------------------------

#: 9999-12-31 23:59:59.999 UTC, the last millisecond a datetime holds.
LAST_DATETIME_MS = 253_402_300_799_999


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_scalar_helpers_agree_with_the_oracle_and_the_kernels(value: bytes) -> None:
    oracle = ULID.from_bytes(value)
    row = np.frombuffer(value, dtype=np.uint8).reshape(1, 16)
    assert cu.timestamp_ms_one(value) == oracle.milliseconds == int(cu.timestamp_ms(row)[0])
    # python-ulid's datetime goes through a float (2248-09-26 ...22.209999 for 210 ms):
    # the exact time is the epoch plus the milliseconds.
    if oracle.milliseconds <= LAST_DATETIME_MS:
        epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
        exact = epoch + timedelta(milliseconds=oracle.milliseconds)
        assert cu.timestamp_one(value) == exact
        assert abs(exact - oracle.datetime) < timedelta(milliseconds=1)
    else:
        with pytest.raises(cu.InvalidULID, match="lies after 9999-12-31"):
            cu.timestamp_one(value)
    assert cu.to_hex_one(value) == oracle.hex == value.hex()
    assert cu.from_hex_one(oracle.hex.upper()) == value
    if value[0] < 0x80:  # 26 characters hold 130 bits: text exists for the lower half
        assert cu.parse_one(str(oracle)) == value == cu.parse_one(f" {value.hex()} ")


def test_scalar_helpers_refuse_bad_values_precisely() -> None:
    with pytest.raises(cu.InvalidULID, match="wrong length 3, expected 16 bytes"):
        cu.timestamp_one(b"abc")
    with pytest.raises(cu.InvalidULID, match="expected 32 hex digits, got 31 characters"):
        cu.from_hex_one("0" * 31)
    with pytest.raises(cu.InvalidULID, match="got a character that is not one"):
        cu.from_hex_one("g" * 32)
    with pytest.raises(cu.InvalidULID, match="invalid character 'U' at position 25"):
        cu.parse_one("01ARZ3NDEKTSV4RRFFQ69G5FAU")
    with pytest.raises(TypeError, match="to_hex_one\\(\\) expects bytes, got str"):
        cu.to_hex_one("00")  # type: ignore[arg-type]


def test_the_last_millisecond_of_a_datetime_and_the_next() -> None:
    last = LAST_DATETIME_MS.to_bytes(6, "big") + bytes(10)
    assert cu.timestamp_one(last).isoformat() == "9999-12-31T23:59:59.999000+00:00"
    with pytest.raises(cu.InvalidULID, match=r"\(253402300800000 ms\) lies after 9999-12-31"):
        cu.timestamp_one((LAST_DATETIME_MS + 1).to_bytes(6, "big") + bytes(10))
