"""What one database must provide, and the values that cross from it to the rest.

One :class:`Dialect` per database (PostgreSQL in :mod:`changefeed.dialects.postgres`,
SQL Server in :mod:`changefeed.dialects.sqlserver`) owns every statement changefeed sends
to it and hands out its parts: a connection, the feed client that writes and reads
(:class:`~changefeed.client.feed.FeedClient`), the Spark source's reads on an open
connection (:class:`Backend`) and a snapshot's statements (:class:`SnapshotStatements`).
The Spark source, the landing, the snapshot and the CLI see only these interfaces; what is
not per database (planning, offsets, Arrow batches, the landing) lives above them.

Nothing here imports a database driver, PyArrow or PySpark: the CLI's ``status`` and
``barrier`` choose a dialect with only a driver installed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from changefeed.client.feed import FeedClient
from changefeed.dialects.feed import Connection, Row, SourceFeed
from changefeed.dialects.rows import RowLayout
from changefeed.dialects.snapshot_types import Chunk, SnapshotRequest
from changefeed.errors import ChangefeedError, ChangefeedSourceError

#: Outbox events one move publishes, and the most moves per shard and plan (both backends).
MOVE_ROWS = 10_000
MAX_MOVES = 100

#: A snapshot chunk's read straight into Arrow arrays: ``(sql, params) -> batches`` of the
#: key columns, then the payload columns, of the layout's types.
ArrowChunkReader = Callable[[str, Sequence[Any]], Iterator[list[Any]]]


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


class ChunkStatements(Protocol):
    """The SQL of a request's chunks on the feed's source table (what
    :meth:`SnapshotStatements.reader` returns): each statement and its parameters."""

    info: SourceFeed
    shard_expression: str | None

    def chunk_sql(self, shard: int, chunk: Chunk) -> tuple[str, list[Any]]: ...

    def sample_sql(
        self, shard: int, whole: Chunk, percent: float | None
    ) -> tuple[str, list[Any]]: ...


class SnapshotStatements(Protocol):
    """The database's side of a snapshot: the requests, the feed's shard expression, the
    table's size, and the chunk and sample reads (their SQL from :meth:`reader`)."""

    def reader(self, info: SourceFeed, shard_expression: str | None) -> ChunkStatements:
        """The chunk and sample statements (``chunk_sql``, ``sample_sql``) of the feed."""
        ...

    def pending_requests(self, conn: Any, info: SourceFeed) -> list[SnapshotRequest]: ...

    def request(
        self, conn: Any, info: SourceFeed, shard: int, key_from: str | None, key_to: str | None
    ) -> SnapshotRequest: ...

    def finish(self, conn: Any, info: SourceFeed, request: SnapshotRequest, rows: int) -> None: ...

    def shard_expression(self, conn: Any, info: SourceFeed) -> str | None: ...

    def estimated_rows(self, conn: Any, source: str) -> int: ...

    def fetch_all(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    def fetch_batches(
        self, conn: Any, sql: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]: ...

    def arrow_reader(self, conn: Any, uri: str, layout: RowLayout) -> ArrowChunkReader | None:
        """A chunk read straight into Arrow arrays (key columns, then payload columns, of
        the layout's types), or None: the task reads rows with :meth:`fetch_batches`."""
        ...


class Dialect(ABC):
    """One database: its name and URI schemes, and the factory of its parts.

    Both implementations have the same methods with the same signatures and meaning
    (tests/test_dialects.py checks it); a third database implements this class and is
    added to :data:`changefeed.dialects.DIALECTS`.
    """

    #: The dialect's name, as :class:`Connection` and :class:`FeedInfo` carry it.
    name: ClassVar[str]
    #: The database's name for messages ("PostgreSQL").
    title: ClassVar[str]
    #: The URI schemes of ``--connection`` and the ``connection`` option that name it.
    schemes: ClassVar[tuple[str, ...]]
    #: The package extra that installs its driver: ``pip install 'changefeed[<extra>]'``.
    extra: ClassVar[str]

    @abstractmethod
    def connect(self, uri: str, *, password: str | None = None,
                application_name: str = "changefeed") -> Any:  # fmt: skip
        """An autocommit DB-API connection to ``uri`` (``password`` replaces the URI's).
        Raises :class:`~changefeed.errors.CannotConnect` naming the server and the reason,
        or when the driver is not installed, the extra that installs it."""

    @abstractmethod
    def client(self, feed_id: str, schema: str = "changefeed") -> FeedClient:
        """The feed client of ``feed_id`` (``schema.table``) under the changefeed schema."""

    @abstractmethod
    def registered_feeds(self, conn: Any, schema: str = "changefeed") -> Mapping[str, str]:
        """``feed_id -> mode`` of every feed set up under ``schema``; raises
        :class:`~changefeed.errors.FeedNotFound` when there is no registry."""

    @abstractmethod
    def permission_denied(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by this database's driver, refused a privilege."""

    @abstractmethod
    def reads(self, connection: Connection, changefeed_schema: str = "changefeed") -> Backend:
        """The Spark source's reads on a new connection to ``connection`` (close it)."""

    @abstractmethod
    def snapshot(self) -> SnapshotStatements:
        """A snapshot's statements on this database (docs/protocol.md section 12)."""

    def __repr__(self) -> str:
        return f"<{self.title} dialect>"
