"""Clients for change feeds set up by the dbt macros.

PostgreSQL (psycopg 3): :class:`PostgresFeed`. See ``docs/postgres.md``. SQL Server
(pymssql): :mod:`changefeed.client.sqlserver`, the calls the Spark source makes so far.
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
    WrongMode,
)
from changefeed.client.postgres import (
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
    "CannotConnect",
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
    "WrongMode",
    "quote_mssql",
    "quote_pg",
    "quote_pg_literal",
    "redact",
    "registered_feeds",
]
