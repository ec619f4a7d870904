"""Clients for change feeds set up by the dbt macros.

PostgreSQL (psycopg 3): :class:`PostgresFeed`. See ``docs/postgres.md``. SQL Server
(pymssql): :class:`SqlServerFeed`, the same API (``docs/sqlserver.md``). Each is defined
with the rest of its database's statements, in :mod:`changefeed.dialects`; what they
share (:class:`~changefeed.client.feed.FeedClient`, :class:`FeedInfo`, quoting,
:func:`redact`, the argument checks) is here, in :mod:`changefeed.client.core`,
:mod:`changefeed.client.feed` and :mod:`changefeed.client.checks`; the errors in
:mod:`changefeed.client.errors`.

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
from changefeed.dialects.postgres.client import PostgresFeed, Write, registered_feeds
from changefeed.dialects.sqlserver.client import SqlServerFeed, SqlServerWrite

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
