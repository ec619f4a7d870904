"""Crockford base32 encode/decode of ULID row matrices.

Both kernels work on 10-bit groups, i.e. two chars at a time: the 128 bits split as
8 + 12 x 10 bits, char pair ``k`` holding bits ``120 - 10k`` upwards. The 16 bytes are
read as two big-endian 64-bit halves; pair 6 straddles them (6 bits high, 4 bits low).

Each chunk is handled transposed (one contiguous vector per pair) so that every numpy
call runs over contiguous memory.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from changefeed.ulid import _matrix
from changefeed.ulid._constants import ULID_BYTES, ULID_CHARS
from changefeed.ulid._errors import InvalidULID, text_reason
from changefeed.ulid._scratch import chunks, scratch
from changefeed.ulid._tables import DECODE_PAIRS, ENCODE_PAIRS, INVALID_PAIR

_PAIRS: Final = ULID_CHARS // 2
_STRADDLE: Final = 6
"""The pair made of the low 6 bits of the high half and the top 4 bits of the low half."""

# Shift of each pair within its half; the straddling pair is special-cased.
_HIGH_SHIFTS: Final = np.array([56, 46, 36, 26, 16, 6], dtype=np.int64)[:, None]
_LOW_SHIFTS: Final = np.array([50, 40, 30, 20, 10, 0], dtype=np.int64)[:, None]
_DECODE_SHIFTS: Final = np.concatenate([_HIGH_SHIFTS, [[0]], _LOW_SHIFTS])
# Arithmetic shifts of the int64 halves smear the sign bit into pair 0; 0xFF drops it.
_ENCODE_MASKS: Final = np.array([0xFF] + [0x3FF] * (_PAIRS - 1), dtype=np.int64)[:, None]


def encode(raw: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """Encode ``(n, 16)`` binary ULIDs as ``(n, 26)`` upper-case ASCII base32.

    >>> import numpy as np
    >>> raw = np.frombuffer(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), np.uint8)
    >>> encode(raw.reshape(1, 16)).tobytes()
    b'01ARZ3NDEKTSV4RRFFQ69G5FAV'
    """
    raw = _matrix.rows(raw, ULID_BYTES, "encode", "raw")
    n = raw.shape[0]
    out = np.empty((n, _PAIRS), dtype=np.uint16)
    big_endian = raw.view(">i8")
    for start, stop in chunks(n):
        size = stop - start
        high, low = halves = scratch("encode.halves", (2, size), np.int64)
        halves[...] = big_endian[start:stop].T
        index = scratch("encode.index", (_PAIRS, size), np.int64)
        np.right_shift(high, _HIGH_SHIFTS, out=index[:_STRADDLE])
        np.right_shift(low, _LOW_SHIFTS, out=index[_STRADDLE + 1 :])
        straddle = index[_STRADDLE]
        np.left_shift(high, 4, out=straddle)
        straddle |= (low >> 60) & 0xF
        np.bitwise_and(index, _ENCODE_MASKS, out=index)
        chars = scratch("encode.chars", (_PAIRS, size), np.uint16)
        np.take(ENCODE_PAIRS, index, out=chars, mode="clip")
        out[start:stop] = chars.T
    return out.view(np.uint8)


def decode_valid(text: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    """Decode ``(n, 26)`` ASCII base32 (either case) to ``(n, 16)`` binary; never raises.

    Returns the binary rows and a validity vector; invalid rows are all zero bytes.

    >>> import numpy as np
    >>> text = np.frombuffer(b"01arz3ndektsv4rrffq69g5fav" b"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", np.uint8)
    >>> raw, valid = decode_valid(text.reshape(2, 26))
    >>> raw[0].tobytes().hex(), bool(raw[1].any()), valid.tolist()
    ('01563e3ab5d3d6764c61efb99302bd5b', False, [True, False])
    """
    text = _matrix.rows(text, ULID_CHARS, "decode_valid", "text")
    n = text.shape[0]
    out = np.empty((n, 2), dtype=">i8")
    valid = np.empty(n, dtype=np.bool_)
    char_pairs = text.view(np.uint16)
    for start, stop in chunks(n):
        size = stop - start
        index = scratch("decode.index", (_PAIRS, size), np.int64)
        index[...] = char_pairs[start:stop].T
        values = scratch("decode.values", (_PAIRS, size), np.int64)
        np.take(DECODE_PAIRS, index, out=values, mode="clip")
        # A bad pair anywhere sets INVALID_PAIR in the OR; pair 0 must also stay below 256
        # (first char <= '7'), which shifting it left by 2 turns into the same test.
        flags = scratch("decode.flags", (size,), np.int64)
        np.bitwise_or.reduce(values, axis=0, out=flags)
        first_pair = scratch("decode.first_pair", (size,), np.int64)
        np.left_shift(values[0], 2, out=first_pair)
        flags |= first_pair
        np.less(flags, INVALID_PAIR, out=valid[start:stop])
        straddle_low = scratch("decode.straddle_low", (size,), np.int64)
        np.left_shift(values[_STRADDLE], 60, out=straddle_low)
        values[_STRADDLE] >>= 4
        np.left_shift(values, _DECODE_SHIFTS, out=values)
        high, low = halves = scratch("decode.halves", (2, size), np.int64)
        np.bitwise_or.reduce(values[: _STRADDLE + 1], axis=0, out=high)
        np.bitwise_or.reduce(values[_STRADDLE + 1 :], axis=0, out=low)
        low |= straddle_low
        out[start:stop] = halves.T
    raw = out.view(np.uint8).reshape(n, ULID_BYTES)
    if not valid.all():
        raw[~valid] = 0
    return raw, valid


def decode(text: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """Decode ``(n, 26)`` ASCII base32 (either case) to ``(n, 16)`` binary ULIDs.

    Raises :class:`InvalidULID` naming the first invalid row and why it is invalid.

    >>> import numpy as np
    >>> text = np.frombuffer(b"01ARZ3NDEKTSV4RRFFQ69G5FAV" b"01ARZ3NDEKTSV4RRFFQ69G5FAU", np.uint8)
    >>> decode(text.reshape(2, 26))
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 1: b'01ARZ3NDEKTSV4RRFFQ69G5FAU' is not a valid ULID: \
invalid character 'U' at position 25 (Crockford aliases I, L, O, U are not accepted)
    """
    text = _matrix.rows(text, ULID_CHARS, "decode", "text")
    raw, valid = decode_valid(text)
    if not valid.all():
        index = int(np.argmin(valid))
        value = text[index].tobytes()
        raise InvalidULID(index, value, text_reason(value) or "rejected by the decode kernel")
    return raw
