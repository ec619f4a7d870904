"""Lookup tables shared by the kernels, built once at import (about 0.7 MB).

Pair tables are indexed by a ``uint16`` read straight from two adjacent ASCII bytes, so
they are built by viewing byte pairs through the machine's own byte order.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from changefeed.ulid._constants import ALPHABET

INVALID_PAIR: Final = 1 << 10
"""Marks a char pair outside the alphabet; above any 10-bit value, so one OR finds it."""

_ALL_PAIRS = np.empty((1 << 16, 2), dtype=np.uint8)
_ALL_PAIRS[:, 0] = np.arange(1 << 16) & 0xFF
_ALL_PAIRS[:, 1] = np.arange(1 << 16) >> 8
_PAIR_KEYS = _ALL_PAIRS.view(np.uint16).ravel()


def _pair_chars(first: NDArray[np.uint8], second: NDArray[np.uint8]) -> NDArray[np.uint16]:
    pairs = np.ascontiguousarray(np.stack([first, second], axis=1).astype(np.uint8))
    return pairs.view(np.uint16).ravel()


def _char_values(digits: bytes) -> NDArray[np.int64]:
    """Value of each byte as a digit of ``digits`` (either case), -1 if it is none."""
    values = np.full(256, -1, dtype=np.int64)
    for value, char in enumerate(digits):
        values[char] = value
        values[ord(chr(char).lower())] = value
    return values


def _pair_values(digits: bytes, bits: int, invalid: int) -> NDArray[np.int64]:
    per_char = _char_values(digits)
    first = per_char[_ALL_PAIRS[:, 0]]
    second = per_char[_ALL_PAIRS[:, 1]]
    table = np.full(1 << 16, invalid, dtype=np.int64)
    ok = (first >= 0) & (second >= 0)
    table[_PAIR_KEYS[ok]] = (first[ok] << bits) | second[ok]
    return table


_TEN_BITS = np.arange(1 << 10)
_ALPHABET = np.frombuffer(ALPHABET, dtype=np.uint8)
ENCODE_PAIRS: Final = _pair_chars(_ALPHABET[_TEN_BITS >> 5], _ALPHABET[_TEN_BITS & 0x1F])
"""10-bit value -> its two base32 chars as one ``uint16``."""

DECODE_PAIRS: Final = _pair_values(ALPHABET, 5, INVALID_PAIR)
"""Two ASCII chars as ``uint16`` -> their 10-bit value, or :data:`INVALID_PAIR`."""

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_BYTES = np.arange(256)
HEX_PAIRS: Final = _pair_chars(_HEX_DIGITS[_BYTES >> 4], _HEX_DIGITS[_BYTES & 0xF])
"""Byte -> its two lower-case hex digits as one ``uint16``."""

INVALID_HEX: Final = 1 << 8
UNHEX_PAIRS: Final = _pair_values(b"0123456789ABCDEF", 4, INVALID_HEX).astype(np.int16)
"""Two ASCII hex digits as ``uint16`` -> their byte value, or :data:`INVALID_HEX`."""

for _table in (ENCODE_PAIRS, DECODE_PAIRS, HEX_PAIRS, UNHEX_PAIRS):
    _table.flags.writeable = False
