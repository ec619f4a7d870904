"""One-value conveniences over the array kernels, for tests, CLIs and error paths."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from string import hexdigits

import numpy as np

from changefeed.ulid._codec import decode, encode
from changefeed.ulid._constants import ULID_BYTES, ULID_CHARS
from changefeed.ulid._errors import InvalidULID, binary_reason, text_reason


def encode_one(value: bytes, *, index: int = 0) -> str:
    """Encode one 16-byte ULID as canonical base32 text.

    ``index`` is the row reported if ``value`` is invalid.

    >>> encode_one(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"))
    '01ARZ3NDEKTSV4RRFFQ69G5FAV'
    >>> encode_one(b"too short")
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 0: b'too short' is not a valid ULID: \
wrong length 9, expected 16 bytes
    """
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"encode_one() expects bytes, got {type(value).__name__}")
    reason = binary_reason(bytes(value))
    if reason is not None:
        raise InvalidULID(index, value, reason)
    raw = np.frombuffer(value, dtype=np.uint8).reshape(1, ULID_BYTES)
    return encode(raw).tobytes().decode("ascii")


def decode_one(value: str, *, index: int = 0) -> bytes:
    """Decode one ULID from base32 text (either case) to its 16 bytes.

    ``index`` is the row reported if ``value`` is invalid, so a caller that found a bad
    row with :func:`decode_valid` can raise the precise error for it.

    >>> decode_one("01arz3ndektsv4rrffq69g5fav").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    >>> decode_one("01ARZ3NDEKTSV4RRFFQ69G5FA", index=7)
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 7: '01ARZ3NDEKTSV4RRFFQ69G5FA' is not a valid ULID: \
wrong length 25, expected 26 characters
    """
    if not isinstance(value, str):
        raise TypeError(f"decode_one() expects str, got {type(value).__name__}")
    reason = text_reason(value)
    if reason is not None:
        raise InvalidULID(index, value, reason)
    text = np.frombuffer(value.encode("ascii"), dtype=np.uint8).reshape(1, ULID_CHARS)
    return decode(text).tobytes()


def timestamp_ms_one(value: bytes, *, index: int = 0) -> int:
    """The Unix milliseconds in the first 48 bits of one 16-byte ULID.

    >>> timestamp_ms_one(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"))
    1469922850259
    """
    _check_binary(value, index, "timestamp_ms_one")
    return int.from_bytes(bytes(value[:6]), "big")


def timestamp_one(value: bytes, *, index: int = 0) -> datetime:
    """The time of one 16-byte ULID, as an aware UTC ``datetime``, exact to the
    millisecond (no float on the way). A ULID's 48 bits reach the year 10889, Python's
    ``datetime`` only 9999: a later time raises :class:`InvalidULID` saying so.

    >>> timestamp_one(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b")).isoformat()
    '2016-07-30T23:54:10.259000+00:00'
    """
    millis = timestamp_ms_one(value, index=index)
    if millis > _MAX_DATETIME_MS:
        raise InvalidULID(
            index, value, f"its time ({millis} ms) lies after 9999-12-31, beyond a datetime"
        )
    return _EPOCH + timedelta(milliseconds=millis)


def to_hex_one(value: bytes, *, index: int = 0) -> str:
    """One 16-byte ULID as 32 lower-case hex digits (the form of a feed offset's cursor).

    >>> to_hex_one(bytes(range(16)))
    '000102030405060708090a0b0c0d0e0f'
    """
    _check_binary(value, index, "to_hex_one")
    return bytes(value).hex()


def from_hex_one(value: str, *, index: int = 0) -> bytes:
    """32 hex digits (either case) as one 16-byte ULID.

    >>> from_hex_one("000102030405060708090A0B0C0D0E0F") == bytes(range(16))
    True
    >>> from_hex_one("0001")
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 0: '0001' is not a valid ULID: expected 32 hex \
digits, got 4 characters
    """
    if not isinstance(value, str):
        raise TypeError(f"from_hex_one() expects str, got {type(value).__name__}")
    if len(value) != 2 * ULID_BYTES or not _HEX_DIGITS.issuperset(value):
        reason = f"expected {2 * ULID_BYTES} hex digits, got {len(value)} characters"
        if len(value) == 2 * ULID_BYTES:
            reason = f"expected {2 * ULID_BYTES} hex digits, got a character that is not one"
        raise InvalidULID(index, value, reason)
    return bytes.fromhex(value)


def previous_one(value: bytes, *, index: int = 0) -> bytes:
    """The ULID just below ``value`` (its 16 bytes as one unsigned number, minus one): where
    a read strictly after a cursor stops to end right before ``value``.

    >>> previous_one(bytes(15) + b"\x01") == bytes(16)
    True
    >>> previous_one(bytes(16))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 0: ... no ULID lies below 16 zero bytes
    """
    _check_binary(value, index, "previous_one")
    number = int.from_bytes(value, "big")
    if number == 0:
        raise InvalidULID(index, value, "no ULID lies below 16 zero bytes")
    return (number - 1).to_bytes(ULID_BYTES, "big")


def parse_one(value: str, *, index: int = 0) -> bytes:
    """One ULID as a user may write it: 26 characters of Crockford base32 (either case) or
    32 hex digits; surrounding blanks are ignored. The error of a bad value is the base32
    one (the form users see most).

    >>> parse_one(" 01ARZ3NDEKTSV4RRFFQ69G5FAV ").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    >>> parse_one("01563e3ab5d3d6764c61efb99302bd5b") == parse_one("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    True
    """
    if not isinstance(value, str):
        raise TypeError(f"parse_one() expects str, got {type(value).__name__}")
    text = value.strip()
    if len(text) == 2 * ULID_BYTES and _HEX_DIGITS.issuperset(text):
        return bytes.fromhex(text)
    return decode_one(text, index=index)


_HEX_DIGITS = frozenset(hexdigits)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The last millisecond a ``datetime`` holds (9999-12-31 23:59:59.999 UTC).
_MAX_DATETIME_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _EPOCH) // (
    timedelta(milliseconds=1)
)


def _check_binary(value: bytes, index: int, function: str) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{function}() expects bytes, got {type(value).__name__}")
    reason = binary_reason(bytes(value))
    if reason is not None:
        raise InvalidULID(index, value, reason)
