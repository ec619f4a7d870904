"""One-value conveniences over the array kernels, for tests, CLIs and error paths."""

from __future__ import annotations

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
