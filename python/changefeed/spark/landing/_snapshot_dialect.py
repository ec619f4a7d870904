"""What a snapshot asks of the source database (docs/protocol.md section 12), one
implementation per dialect: PostgreSQL's in :mod:`._snapshot` (psycopg), SQL Server's in
:mod:`._snapshot_sqlserver` (pymssql). The planning and the landing around them are the
same for both."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from changefeed.spark.landing._snapshot_plan import SnapshotRequest
    from changefeed.spark.source import RowLayout, SourceFeed


class SnapshotStatements(Protocol):
    """The database's side of a snapshot: the requests, the feed's shard expression, the
    table's size, and the chunk and sample reads (their SQL from :meth:`reader`)."""

    def reader(self, info: SourceFeed, shard_expression: str | None) -> Any:
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


def statements(dialect: str) -> SnapshotStatements:
    """The snapshot statements of a source database (``SourceFeed.dialect``)."""
    if dialect == "sqlserver":
        from changefeed.spark.landing._snapshot_sqlserver import SqlServerStatements

        return SqlServerStatements()
    from changefeed.spark.landing._snapshot import PostgresStatements

    return PostgresStatements()
