"""Canonical UUID text (8-4-4-4-12 hex) of ULID row matrices: same 16 bytes, new spelling."""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from changefeed.ulid import _matrix
from changefeed.ulid._constants import DASH_POSITIONS, ULID_BYTES, UUID_CHARS
from changefeed.ulid._errors import InvalidULID, uuid_reason
from changefeed.ulid._scratch import chunks, scratch
from changefeed.ulid._tables import HEX_PAIRS, INVALID_HEX, UNHEX_PAIRS

_DASH: Final = ord("-")
# (first text column, end text column, first hex digit) of each dash-separated group.
_GROUPS: Final = ((0, 8, 0), (9, 13, 8), (14, 18, 12), (19, 23, 16), (24, 36, 20))
_DASH_COLUMNS: Final = np.array(DASH_POSITIONS)
_ALL_DASHES: Final = int.from_bytes(bytes([1] * len(DASH_POSITIONS)), "little")
"""Four True bools read as one uint32 (the same in either byte order)."""


def to_uuid(raw: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """Spell ``(n, 16)`` ULIDs as ``(n, 36)`` lower-case canonical UUID text.

    >>> import numpy as np
    >>> raw = np.frombuffer(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), np.uint8)
    >>> to_uuid(raw.reshape(1, 16)).tobytes()
    b'01563e3a-b5d3-d676-4c61-efb99302bd5b'
    """
    raw = _matrix.rows(raw, ULID_BYTES, "to_uuid", "raw")
    n = raw.shape[0]
    out = np.empty((n, UUID_CHARS), dtype=np.uint8)
    for start, stop in chunks(n):
        index = scratch("to_uuid.index", (stop - start, ULID_BYTES), np.int64)
        index[...] = raw[start:stop]
        digits = scratch("to_uuid.digits", (stop - start, ULID_BYTES), np.uint16)
        np.take(HEX_PAIRS, index, out=digits, mode="clip")
        hex_digits = digits.view(np.uint8)
        text = out[start:stop]
        for lo, hi, first_digit in _GROUPS:
            text[:, lo:hi] = hex_digits[:, first_digit : first_digit + hi - lo]
    out[:, _DASH_COLUMNS] = _DASH
    return out


def from_uuid_valid(text: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    """Parse ``(n, 36)`` UUID text (either case) to ``(n, 16)`` bytes; never raises.

    Returns the binary rows and a validity vector; invalid rows are all zero bytes.

    >>> import numpy as np
    >>> text = np.frombuffer(b"01563E3A-B5D3-D676-4C61-EFB99302BD5B" * 2, np.uint8).copy()
    >>> text[36 + 8] = ord("+")
    >>> raw, valid = from_uuid_valid(text.reshape(2, 36))
    >>> raw[0].tobytes().hex(), valid.tolist()
    ('01563e3ab5d3d6764c61efb99302bd5b', [True, False])
    """
    text = _matrix.rows(text, UUID_CHARS, "from_uuid_valid", "text")
    n = text.shape[0]
    raw = np.empty((n, ULID_BYTES), dtype=np.uint8)
    valid = np.empty(n, dtype=np.bool_)
    for start, stop in chunks(n):
        rows = text[start:stop]
        digits = scratch("from_uuid.digits", (stop - start, 2 * ULID_BYTES), np.uint8)
        for lo, hi, first_digit in _GROUPS:
            digits[:, first_digit : first_digit + hi - lo] = rows[:, lo:hi]
        index = scratch("from_uuid.index", (stop - start, ULID_BYTES), np.int64)
        index[...] = digits.view(np.uint16)
        values = scratch("from_uuid.values", (stop - start, ULID_BYTES), np.int16)
        np.take(UNHEX_PAIRS, index, out=values, mode="clip")
        # Per row: 16 "bad byte" flags read as two uint64 words, 4 dash flags as one uint32.
        bad_bytes = (values >= INVALID_HEX).view(np.uint64)
        dashes = np.ascontiguousarray(rows[:, _DASH_COLUMNS] == _DASH).view(np.uint32)[:, 0]
        ok = valid[start:stop]
        np.equal(bad_bytes[:, 0] | bad_bytes[:, 1], 0, out=ok)
        ok &= dashes == _ALL_DASHES
        raw[start:stop] = values
    if not valid.all():
        raw[~valid] = 0
    return raw, valid


def from_uuid(text: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """Parse ``(n, 36)`` UUID text (either case) to ``(n, 16)`` bytes.

    Raises :class:`InvalidULID` naming the first invalid row, e.g. a misplaced dash or a
    non-hex character and its position.

    >>> import numpy as np
    >>> text = np.frombuffer(b"01563e3a-b5d3-d676-4c61-efb99302bd5g", np.uint8)
    >>> from_uuid(text.reshape(1, 36))
    Traceback (most recent call last):
    ...
    changefeed.ulid._errors.InvalidULID: row 0: b'01563e3a-b5d3-d676-4c61-efb99302bd5g' \
is not a valid UUID: invalid hex character 'g' at position 35
    """
    text = _matrix.rows(text, UUID_CHARS, "from_uuid", "text")
    raw, valid = from_uuid_valid(text)
    if not valid.all():
        index = int(np.argmin(valid))
        value = text[index].tobytes()
        reason = uuid_reason(value) or "rejected by the UUID kernel"
        raise InvalidULID(index, value, reason, kind="UUID")
    return raw
