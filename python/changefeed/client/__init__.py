"""Clients for change feeds set up by the dbt macros.

PostgreSQL (psycopg 3): :class:`PostgresFeed`. See ``docs/postgres.md``. SQL Server
(pymssql): :class:`SqlServerFeed`, the same API (``docs/sqlserver.md``).
What all databases share (:class:`FeedInfo`, quoting, :func:`redact`) is in
:mod:`changefeed.client.core`; the errors in :mod:`changefeed.client.errors`.

>>> from changefeed.client import PostgresFeed, ZERO_ULID
>>> PostgresFeed("shop.orders").feed_id
'shop.orders'
>>> ZERO_ULID == bytes(16)
True
"""

from changefeed.client.core import (
    ZERO_ULID,
    FeedInfo,
    KeyColumn,
    quote_mssql,
    quote_pg,
    quote_pg_literal,
    redact,
)
from changefeed.client.errors import (
    BarrierTimeout,
    CannotConnect,
    CaptureLost,
    ChangefeedError,
    FeedNotFound,
    FellBehindRetention,
    InvalidArgument,
    LockBurned,
    LockInTransaction,
    NeedsUpgrade,
    NoWriteInProgress,
    SetupConflict,
    UlidRangeError,
    WriteAbandoned,
    WriteInProgress,
    WriteOutsideBlock,
    WriteTransactionBroken,
    WrongMode,
)
from changefeed.client.feed import Barrier, Event, Page, Retained, SafePoint, Snapshot
from changefeed.client.postgres import PostgresFeed, Write, registered_feeds
from changefeed.client.sqlserver import SqlServerFeed, SqlServerWrite

__all__ = [
    "ZERO_ULID",
    "Barrier",
    "BarrierTimeout",
    "CannotConnect",
    "CaptureLost",
    "ChangefeedError",
    "Event",
    "FeedInfo",
    "FeedNotFound",
    "FellBehindRetention",
    "InvalidArgument",
    "KeyColumn",
    "LockBurned",
    "LockInTransaction",
    "NeedsUpgrade",
    "NoWriteInProgress",
    "Page",
    "PostgresFeed",
    "Retained",
    "SafePoint",
    "SetupConflict",
    "Snapshot",
    "SqlServerFeed",
    "SqlServerWrite",
    "UlidRangeError",
    "Write",
    "WriteAbandoned",
    "WriteInProgress",
    "WriteOutsideBlock",
    "WriteTransactionBroken",
    "WrongMode",
    "quote_mssql",
    "quote_pg",
    "quote_pg_literal",
    "redact",
    "registered_feeds",
]
