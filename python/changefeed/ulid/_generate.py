"""Batch ULID generation by the mssql-changefeed rule."""

from __future__ import annotations

import os
import time
from typing import Final

import numpy as np
from numpy.typing import NDArray

from changefeed.ulid._constants import (
    HIGH_BYTES,
    LOW_HEADROOM_BIT,
    MAX_TIMESTAMP_MS,
    TIMESTAMP_BYTES,
    ULID_BYTES,
)

_RANDOM_BYTES: Final = ULID_BYTES - TIMESTAMP_BYTES
_HEADROOM_MASK: Final = (2**64 - 1) ^ (1 << LOW_HEADROOM_BIT)
MAX_BATCH: Final = 1 << LOW_HEADROOM_BIT
"""Most ULIDs one batch may hold: the headroom that clearing bit 62 leaves."""


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"generate() expects {name} as int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"generate() expects {low} <= {name} <= {high}, got {value}")
    return int(value)


def generate(
    n: int, *, timestamp_ms: int | None = None, rng: np.random.Generator | None = None
) -> NDArray[np.uint8]:
    """Generate ``n`` increasing ULIDs sharing one timestamp, as an ``(n, 16)`` matrix.

    One batch draws 10 random bytes: 2 complete ``ulid_high``, 8 start ``ulid_low`` with
    bit 62 cleared, and row ``i`` gets ``low + i``. So ``ulid_high`` is constant, the
    rows are strictly increasing as bytes and as signed ``ulid_low``, and up to 2**62
    rows never overflow. Randomness comes from ``os.urandom`` unless ``rng`` is given
    (for reproducible tests). ``timestamp_ms`` defaults to now.

    >>> import numpy as np
    >>> raw = generate(3, timestamp_ms=1469922850259, rng=np.random.default_rng(7))
    >>> from changefeed.ulid import encode, to_parts
    >>> [row.tobytes()[:10] for row in encode(raw)]
    [b'01ARZ3NDEK', b'01ARZ3NDEK', b'01ARZ3NDEK']
    >>> np.diff(to_parts(raw)[1]).tolist()
    [1, 1]
    """
    n = _check_int("n", n, 0, MAX_BATCH)
    if timestamp_ms is None:
        timestamp_ms = time.time_ns() // 1_000_000
    timestamp_ms = _check_int("timestamp_ms", timestamp_ms, 0, MAX_TIMESTAMP_MS)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"generate() expects rng as numpy.random.Generator, got {type(rng).__name__}"
        )
    random = os.urandom(_RANDOM_BYTES) if rng is None else rng.bytes(_RANDOM_BYTES)
    high = timestamp_ms.to_bytes(TIMESTAMP_BYTES, "big") + random[: HIGH_BYTES - TIMESTAMP_BYTES]
    start = int.from_bytes(random[HIGH_BYTES - TIMESTAMP_BYTES :], "big") & _HEADROOM_MASK
    out = np.empty((n, ULID_BYTES), dtype=np.uint8)
    out[:, :HIGH_BYTES] = np.frombuffer(high, dtype=np.uint8)
    lows = np.arange(n, dtype=np.uint64)
    lows += np.uint64(start)
    out[:, HIGH_BYTES:].view(">u8")[:, 0] = lows
    return out
