"""Views of the 16-byte layout: timestamp, mssql-changefeed parts and sort keys."""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from changefeed.ulid import _matrix
from changefeed.ulid._constants import HIGH_BYTES, ULID_BYTES

_SIGN_BIT: Final = np.int64(-(2**63))
_TIMESTAMP_SHIFT: Final = 8 * (HIGH_BYTES - 6)


def timestamp_ms(raw: NDArray[np.uint8]) -> NDArray[np.int64]:
    """Milliseconds since the Unix epoch held in the first 6 bytes of each ULID.

    >>> import numpy as np
    >>> raw = np.frombuffer(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), np.uint8)
    >>> timestamp_ms(raw.reshape(1, 16)).tolist()
    [1469922850259]
    """
    raw = _matrix.rows(raw, ULID_BYTES, "timestamp_ms", "raw")
    high = raw.view(">u8")[:, 0]
    return (high >> _TIMESTAMP_SHIFT).astype(np.int64)


def timestamp(raw: NDArray[np.uint8]) -> NDArray[np.datetime64]:
    """The ULID timestamps as ``datetime64[ms]`` (UTC).

    >>> import numpy as np
    >>> raw = np.frombuffer(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), np.uint8)
    >>> timestamp(raw.reshape(1, 16))
    array(['2016-07-30T23:54:10.259'], dtype='datetime64[ms]')
    """
    return timestamp_ms(raw).view("datetime64[ms]")


def from_parts(high: NDArray[np.uint8], low: NDArray[np.int64]) -> NDArray[np.uint8]:
    """Join mssql-changefeed ``ulid_high`` (8 bytes) and ``ulid_low`` (int64) rows.

    The ULID is ``high`` followed by the big-endian two's-complement bytes of ``low``.

    >>> import numpy as np
    >>> high = np.frombuffer(bytes.fromhex("01563e3ab5d3d676"), np.uint8).reshape(1, 8)
    >>> from_parts(high, np.array([-1])).tobytes().hex()
    '01563e3ab5d3d676ffffffffffffffff'
    """
    high = _matrix.rows(high, HIGH_BYTES, "from_parts", "high")
    low = _matrix.int64_vector(low, high.shape[0], "from_parts", "low")
    out = np.empty((high.shape[0], ULID_BYTES), dtype=np.uint8)
    out[:, :HIGH_BYTES] = high
    out[:, HIGH_BYTES:].view(">i8")[:, 0] = low
    return out


def to_parts(raw: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Split ULIDs into mssql-changefeed ``ulid_high`` (n, 8) and signed ``ulid_low``.

    >>> import numpy as np
    >>> raw = np.frombuffer(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), np.uint8)
    >>> high, low = to_parts(raw.reshape(1, 16))
    >>> high.tobytes().hex(), low.tolist()
    ('01563e3ab5d3d676', [5503943799937875291])
    """
    raw = _matrix.rows(raw, ULID_BYTES, "to_parts", "raw")
    high = raw[:, :HIGH_BYTES].copy()
    low = raw.view(">i8")[:, 1].astype(np.int64)
    return high, low


def order_keys(raw: NDArray[np.uint8]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Two int64 sort keys whose signed lexicographic order is the ULIDs' byte order.

    Each big-endian 64-bit half with its sign bit flipped: unsigned order becomes signed
    order, which is what Spark, SQL and numpy sort int64 by.

    >>> import numpy as np
    >>> raw = np.zeros((2, 16), np.uint8)
    >>> raw[1, 0] = 0x80
    >>> [k.tolist() for k in order_keys(raw)]
    [[-9223372036854775808, 0], [-9223372036854775808, -9223372036854775808]]
    """
    raw = _matrix.rows(raw, ULID_BYTES, "order_keys", "raw")
    halves = raw.view(">i8")
    first = np.bitwise_xor(halves[:, 0], _SIGN_BIT, dtype=np.int64)
    second = np.bitwise_xor(halves[:, 1], _SIGN_BIT, dtype=np.int64)
    return first, second
