"""PostgreSQL's statements of a snapshot (docs/protocol.md section 12), through psycopg:
the requests (``snapshot:<feed>``, ``snapshot_begin``, ``snapshot_finish``), the feed's
``shard`` expression, the table's size, and the chunk and sample reads of the source.
The landing runs them exactly as it runs SQL Server's
(:class:`~changefeed.dialects.base.SnapshotStatements`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from changefeed.client.core import quote_pg
from changefeed.dialects.base import ArrowChunkReader
from changefeed.dialects.feed import SourceFeed
from changefeed.dialects.postgres.client import PostgresFeed
from changefeed.dialects.rows import RowLayout
from changefeed.dialects.snapshot_types import Chunk, ClientRequests, chunk_terms
from changefeed.errors import ChangefeedSourceError


def pg_text(sql: str) -> str:
    """SQL text of the user's (a shard expression such as ``region % 4``, a name) as it
    goes into a statement run with parameters: psycopg reads every ``%`` as the start of
    a placeholder, and ``%%`` as one ``%``.

    >>> pg_text("region % 4")
    'region %% 4'
    """
    return sql.replace("%", "%%")


class SourceReader:
    """SQL for a request's chunks, on the feed's source table (PostgreSQL). Every
    statement runs with parameters, so the names and the shard expression in it are
    :func:`pg_text`."""

    def __init__(self, info: SourceFeed, shard_expression: str | None) -> None:
        if info.payload is None:
            raise ChangefeedSourceError(
                f"a snapshot lands source rows: land feed {info.feed_id} with payload=true "
                "(changefeed land --payload)"
            )
        self.info = info
        self.shard_expression = shard_expression
        self._shard_sql = None if shard_expression is None else pg_text(shard_expression)
        self.source = pg_text(info.info.source)
        self.keys = [pg_text(quote_pg(k.name)) for k in info.keys]
        self.types = [pg_text(k.db_type) for k in info.keys]
        self.columns = [pg_text(quote_pg(c.name)) for c in info.payload]

    def _row(self, values: Sequence[Any]) -> tuple[str, list[Any]]:
        casts = ", ".join(f"%s::{t}" for t in self.types)
        return f"row({casts})", [None if v is None else str(v) for v in values]

    def where(self, shard: int, chunk_or_range: Chunk) -> tuple[str, list[Any]]:
        """The predicate of a chunk (or of a whole request, as a chunk with index -1)."""
        key = f"row({', '.join(self.keys)})"

        def compare(op: str, bound: Sequence[Any]) -> tuple[str, list[Any]]:
            sql, values = self._row(bound)
            return f"{key} {op} {sql}", values

        terms, params = chunk_terms(self._shard_sql, shard, chunk_or_range, compare)
        return (" and ".join(terms) or "true"), params

    def _order(self) -> str:
        # Qualified: a bare name in ORDER BY means an output column first, and the
        # sample's outputs are the keys as text, which would sort as text.
        return ", ".join(f"s.{k}" for k in self.keys)

    def chunk_sql(self, shard: int, chunk: Chunk) -> tuple[str, list[Any]]:
        where, params = self.where(shard, chunk)
        select = ", ".join([*(f"s.{k}" for k in self.keys), *(f"s.{c}" for c in self.columns)])
        return (
            f"select {select} from {self.source} as s where {where} order by {self._order()}",
            params,
        )

    def sample_sql(self, shard: int, whole: Chunk, percent: float | None) -> tuple[str, list[Any]]:
        where, params = self.where(shard, whole)
        keys_text = ", ".join(f"s.{k}::text" for k in self.keys)
        sample = f" tablesample system ({percent:.6f})" if percent is not None else ""
        return (
            f"select {keys_text} from {self.source} as s{sample} where {where} "
            f"order by {self._order()}",
            params,
        )


def shard_expression(conn: Any, info: SourceFeed) -> str | None:
    """The feed's ``shard`` expression with ``capture: trigger``, else None."""
    row = conn.execute(
        f"select options from {quote_pg(info.changefeed_schema)}.feeds where feed_id = %s",
        (info.feed_id,),
    ).fetchone()
    options = dict(row[0]) if row and row[0] else {}
    if options.get("capture") == "trigger" and options.get("shard"):
        return str(options["shard"])
    return None


def estimated_rows(conn: Any, source: str) -> int:
    row = conn.execute(
        "select c.reltuples::bigint from pg_catalog.pg_class as c "
        "where c.oid = pg_catalog.to_regclass(%s)",
        (source,),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else -1


class PostgresStatements(ClientRequests):
    """PostgreSQL's side of a snapshot (:class:`~changefeed.dialects.base.SnapshotStatements`):
    the functions of this module; the requests through :class:`~changefeed.client.PostgresFeed`."""

    feed_class = PostgresFeed

    def reader(self, info: SourceFeed, shard_expression: str | None) -> SourceReader:
        return SourceReader(info, shard_expression)

    def shard_expression(self, conn: Any, info: SourceFeed) -> str | None:
        return shard_expression(conn, info)

    def estimated_rows(self, conn: Any, source: str) -> int:
        return estimated_rows(conn, source)

    def fetch_all(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def fetch_batches(
        self, conn: Any, sql: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            while rows := cur.fetchmany(size):
                yield rows

    def arrow_reader(self, conn: Any, uri: str, layout: RowLayout) -> ArrowChunkReader | None:
        from changefeed.dialects.postgres import snapshot_arrow

        return snapshot_arrow.reader(conn, uri, layout)
