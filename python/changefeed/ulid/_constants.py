"""Sizes and limits of the ULID layout (https://github.com/ulid/spec)."""

from __future__ import annotations

from typing import Final

ULID_BYTES: Final = 16
"""Binary size: a 48-bit millisecond timestamp then 80 bits, big-endian."""

ULID_CHARS: Final = 26
"""Canonical text size: 130 bits of Crockford base32 carrying 128 bits."""

UUID_CHARS: Final = 36
"""Canonical UUID text size: 32 hex digits and 4 dashes (8-4-4-4-12)."""

ALPHABET: Final = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
"""Crockford base32 without I, L, O and U, in value order."""

MAX_TIMESTAMP_MS: Final = 2**48 - 1
"""Largest timestamp the 48-bit field holds (year 10889)."""

LOW_HEADROOM_BIT: Final = 62
"""Bit of ``ulid_low`` cleared at generation so ``low + i`` never carries into bit 63.

This keeps consecutive ULIDs of a batch both numerically and byte-wise increasing for
up to 2**62 rows, which is the mssql-changefeed generation rule.
"""

TIMESTAMP_BYTES: Final = 6
HIGH_BYTES: Final = 8
"""Size of ``ulid_high``: the 6-byte timestamp and the first 2 random bytes."""

MAX_OVERFLOW_FREE_CHAR: Final = ord("7")
"""26 chars carry 130 bits, so the first char may only use its low 3 bits."""

DASH_POSITIONS: Final = (8, 13, 18, 23)
"""Where the dashes sit in canonical 8-4-4-4-12 UUID text."""
