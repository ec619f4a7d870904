"""Clients for change feeds set up by the dbt macros.

PostgreSQL (psycopg 3): :class:`PostgresFeed`. See ``docs/postgres.md``.

>>> from changefeed.client import PostgresFeed, ZERO_ULID
>>> PostgresFeed("shop.orders").feed_id
'shop.orders'
>>> ZERO_ULID == bytes(16)
True
"""

from changefeed.client._errors import (
    BarrierTimeout,
    CaptureLost,
    ChangefeedError,
    FeedNotFound,
    InvalidArgument,
    LockBurned,
    LockInTransaction,
    NoWriteInProgress,
    SetupConflict,
    UlidRangeError,
    WriteAbandoned,
    WriteInProgress,
    WriteOutsideBlock,
    WrongMode,
)
from changefeed.client._names import FeedInfo, KeyColumn
from changefeed.client.postgres import (
    ZERO_ULID,
    Barrier,
    Event,
    Page,
    PostgresFeed,
    SafePoint,
    Write,
    registered_feeds,
)

__all__ = [
    "ZERO_ULID",
    "Barrier",
    "BarrierTimeout",
    "CaptureLost",
    "ChangefeedError",
    "Event",
    "FeedInfo",
    "FeedNotFound",
    "InvalidArgument",
    "KeyColumn",
    "LockBurned",
    "LockInTransaction",
    "NoWriteInProgress",
    "Page",
    "PostgresFeed",
    "SafePoint",
    "SetupConflict",
    "UlidRangeError",
    "Write",
    "WriteAbandoned",
    "WriteInProgress",
    "WriteOutsideBlock",
    "WrongMode",
    "registered_feeds",
]
