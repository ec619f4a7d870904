"""What the data source needs from a database, and the read loop shared by both adapters.

A :class:`Backend` wraps one connection to PostgreSQL or SQL Server and speaks, through
the database's client (:mod:`changefeed.client`), only to the feed's generated objects
(registry ``changefeed.feeds``, ``safe_point:<feed>``, ``read_feed:<feed>``,
``move_outbox:<feed>``) plus, for payloads, a read of the source table. Everything else
(planning, offsets, Arrow) is shared.
"""

from __future__ import annotations

import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from changefeed.client.core import ZERO_ULID, FeedInfo, redact
from changefeed.errors import ChangefeedError
from changefeed.spark.source._errors import ChangefeedSourceError
from changefeed.spark.source._positions import to_hex
from changefeed.spark.source._types import Column, RowLayout

#: Outbox events one move publishes, and the most moves per shard and plan (both backends).
MOVE_ROWS = 10_000
MAX_MOVES = 100

Row = tuple[Any, ...]


@dataclass(frozen=True)
class SourceFeed:
    """A feed as a read needs it: its registry entry (the client's :class:`FeedInfo`)
    and, with ``payload=true``, the source table's columns. Picklable: it travels in
    partitions."""

    info: FeedInfo
    payload: tuple[Column, ...] | None = None
    images: bool = False
    """Whether the feed table has row image columns (``row_image: true`` now or before):
    events with an image take their payload from it instead of the source (O7)."""

    @property
    def feed_id(self) -> str:
        return self.info.feed_id

    @property
    def mode(self) -> str:
        return self.info.mode

    @property
    def dialect(self) -> str:
        return self.info.dialect

    @property
    def changefeed_schema(self) -> str:
        return self.info.schema

    @property
    def names(self) -> Mapping[str, str]:
        return self.info.names

    @property
    def keys(self) -> tuple[Column, ...]:
        return tuple(Column(k.name, k.data_type) for k in self.info.keys)

    def name(self, kind: str) -> str:
        return self.info.name(kind)

    def layout(self) -> RowLayout:
        return RowLayout(self.dialect, self.keys, self.payload)


@dataclass(frozen=True)
class Connection:
    """A parsed connection URI. ``uri`` keeps the original text (with any password)."""

    dialect: str
    uri: str

    @property
    def display(self) -> str:
        return redact(self.uri)


def parse_connection(
    uri: str, *, user: str | None = None, password: str | None = None
) -> Connection:
    """``postgresql://...`` (any libpq URI, also a Unix-socket ``?host=/dir``) or
    ``mssql://user:password@host:port/database`` (also ``sqlserver://``).

    ``user``/``password`` (the options of the same names) replace those of the URI, so a
    secret can stay out of the URI (Spark redacts an option named ``password``).
    """
    text = (uri or "").strip()
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgresql", "postgres"):
        dialect = "postgres"
    elif scheme in ("mssql", "sqlserver"):
        dialect = "sqlserver"
    else:
        raise ChangefeedSourceError(
            f"connection {redact(text)!r} is not a supported URI: use "
            "postgresql://user:password@host:port/database (libpq form, also "
            "?host=/unix/socket/dir) or mssql://user:password@host:port/database"
        )
    if user is not None or password is not None:
        parts = urllib.parse.urlsplit(text)
        name = user if user is not None else urllib.parse.unquote(parts.username or "")
        secret = password if password is not None else urllib.parse.unquote(parts.password or "")
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
        auth = urllib.parse.quote(name, safe="")
        if secret:
            auth += ":" + urllib.parse.quote(secret, safe="")
        text = urllib.parse.urlunsplit(
            (parts.scheme, f"{auth}@{host}", parts.path, parts.query, parts.fragment)
        )
    return Connection(dialect, text)


class Backend(ABC):
    """One open connection to a feed's database (see the module docstring)."""

    dialect: str
    #: The open DB-API connection (psycopg, pymssql): the snapshot's statements
    #: (``spark.landing``'s dialect modules) run on it.
    conn: Any

    def __init__(self, connection: Connection, changefeed_schema: str) -> None:
        self.connection = connection
        self.changefeed_schema = changefeed_schema

    @abstractmethod
    def describe(self, feed_id: str, payload: bool) -> SourceFeed:
        """The registry row of ``feed_id`` (and the source table's columns if ``payload``)."""

    @abstractmethod
    def shards(self, info: SourceFeed) -> list[int]:
        """Every shard of the feed's state table, in order."""

    @abstractmethod
    def safe_points(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        """The current safe point of each shard (16 zero bytes for a shard with no state)."""

    @abstractmethod
    def move_outbox(self, info: SourceFeed, shards: Sequence[int]) -> None:
        """Outbox mode: publish committed outbox rows so the safe point covers them."""

    @abstractmethod
    def read_page(self, info: SourceFeed, shard: int, cursor: bytes, page_size: int) -> list[Row]:
        """One page of ``read_feed`` after ``cursor``, rows shaped as :class:`RowLayout`."""

    @abstractmethod
    def has_events(self, info: SourceFeed, shard: int, after: bytes, upto: bytes) -> bool:
        """Whether ``shard`` has an event with ``after < ulid <= upto`` (one index probe
        of the feed table; ``upto`` must be an observed safe point)."""

    def horizons(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        """Per shard, the newest event retention removed (protocol 8.1); shards retention
        never touched are left out. Backends without retention have none."""
        return {}

    def save_cursors(self, info: SourceFeed, consumer: str, cursors: Mapping[int, bytes]) -> None:
        """Register ``consumer``'s committed cursors, so retention keeps every event after
        them (protocol 8.1). A feed set up without retention removes nothing: no-op."""
        if "save_cursor" not in info.names:
            return
        try:
            for shard in sorted(cursors):
                self.save_cursor(info, consumer, shard, cursors[shard])
        except ChangefeedError as exc:
            raise ChangefeedSourceError(
                f"feed {info.feed_id}: registering consumer {consumer!r}'s cursors failed: {exc}"
            ) from None

    def save_cursor(self, info: SourceFeed, consumer: str, shard: int, cursor: bytes) -> None:
        """One shard's ``save_cursor``; backends without retention keep everything."""
        return None

    @abstractmethod
    def barrier_wait(self, info: SourceFeed, shard: int, timeout_s: float) -> None:
        """Acquire a read barrier on ``shard`` and wait until it is released (protocol
        section 7; outbox mode: moving the outbox meanwhile): every transaction committed
        before the call then has its events at or below the shard's safe point. Raises
        the client's ``BarrierTimeout`` after ``timeout_s``."""

    @abstractmethod
    def registered_feeds(self) -> list[str]:
        """Every feed id registered under this connection's changefeed schema, sorted
        (what a landing service matches a pattern such as ``shop.*`` against)."""

    @abstractmethod
    def try_writer_lock(self, table: str) -> str | None:
        """Take the writer lock of the landed table ``table`` on this connection until it
        closes, without waiting: ``None`` when taken, else who holds it (protocol 11, F4)."""

    @abstractmethod
    def source_identity(self) -> str:
        """The database the feed lives in, stable across hosts and credentials (none in
        it): what a landed table records as its source."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_range(
    backend: Backend, info: SourceFeed, shard: int, start: bytes, end: bytes, page_size: int
) -> Iterator[list[Row]]:
    """Every event of ``shard`` with ``start < ulid <= end``, page by page, in ULID order.

    ``end`` must be a safe point observed earlier (or below one): everything at or below
    it is committed and immutable (S1, C3), so this returns the same rows whenever it
    runs. Pages end at transaction boundaries (``read_feed``); ``end`` is a safe point,
    itself the last ULID of a block, so cutting a page at ``end`` never splits one.
    """
    cursor = start
    while cursor < end:
        page = backend.read_page(info, shard, cursor, page_size)
        if not page:
            # read_feed stops at the safe point of its own snapshot. It can only be below
            # `end` if the feed went backwards (re-created, restored): never return a
            # silently short range.
            now = backend.safe_points(info, [shard]).get(shard, ZERO_ULID)
            if now < end:
                raise ChangefeedSourceError(
                    f"feed {info.feed_id} shard {shard}: the safe point is now {to_hex(now)}, "
                    f"below {to_hex(end)} that this read was planned up to (was the feed "
                    "torn down and set up again?); nothing is read past a safe point"
                )
            return
        first, last = bytes(page[0][1]), bytes(page[-1][1])
        if first <= cursor:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} shard {shard}: read_feed returned {to_hex(first)}, "
                f"not after the cursor {to_hex(cursor)}"
            )
        if last > end:
            kept = [row for row in page if bytes(row[1]) <= end]
            if kept:
                yield kept
            return
        yield page
        cursor = last
