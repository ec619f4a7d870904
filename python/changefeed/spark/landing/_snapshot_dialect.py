"""What a snapshot asks of the source database (docs/protocol.md section 12), one
implementation per dialect: PostgreSQL's in :mod:`._snapshot_postgres` (psycopg), SQL
Server's in :mod:`._snapshot_sqlserver` (pymssql). The planning and the landing around them
are the same for both."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from changefeed.spark.landing._snapshot_postgres import PostgresStatements
from changefeed.spark.landing._snapshot_sqlserver import SqlServerStatements
from changefeed.spark.landing._snapshot_types import Chunk, SnapshotRequest
from changefeed.spark.source import ChangefeedSourceError, RowLayout, SourceFeed


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

    def arrow_reader(
        self, conn: Any, uri: str, layout: RowLayout
    ) -> Callable[[str, Sequence[Any]], Iterator[list[Any]]] | None:
        """A chunk read straight into Arrow arrays (key columns, then payload columns, of
        the layout's types), or None: the task reads rows with :meth:`fetch_batches`."""
        ...


#: Each dialect of a feed's connection (``SourceFeed.dialect``) and its statements.
STATEMENTS: dict[str, type[SnapshotStatements]] = {
    "postgres": PostgresStatements,
    "sqlserver": SqlServerStatements,
}


def statements(dialect: str) -> SnapshotStatements:
    """The snapshot statements of a source database (``SourceFeed.dialect``)."""
    found = STATEMENTS.get(dialect)
    if found is None:
        raise ChangefeedSourceError(
            f"no snapshot statements for a {dialect!r} database; snapshots read "
            f"{' and '.join(sorted(STATEMENTS))} sources"
        )
    return found()
