"""SQL Server's statements of a snapshot (docs/protocol.md section 12), through pymssql
and its client (:mod:`.client`): the requests (``[snapshot:<feed>]``,
``snapshot_begin``, ``snapshot_finish``), the feed's ``shard`` expression, and the chunk
and sample reads of the source. The landing runs them exactly as it runs
PostgreSQL's (:class:`~changefeed.dialects.base.SnapshotStatements`).

T-SQL has no row-value comparison, so a chunk's key bounds are written out column by
column (:func:`keyset`). Bounds travel as text (JSON, to the executors) and are cast back
to the key column's registered type inside the statement, as parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from changefeed.client.core import quote_mssql
from changefeed.dialects.base import ArrowChunkReader
from changefeed.dialects.feed import SourceFeed
from changefeed.dialects.rows import RowLayout
from changefeed.dialects.snapshot_types import Chunk, ClientRequests, chunk_terms
from changefeed.dialects.sqlserver import client
from changefeed.errors import ChangefeedSourceError

#: A registered SQL Server type as the statements may spell it: ``bigint``,
#: ``nvarchar(40)``, ``decimal(12,2)``, ``varchar(max)``.
_TYPE = re.compile(r"[a-z][a-z0-9_]*(\(\s*(\d+|max)\s*(,\s*\d+\s*)?\))?", re.I)

#: Types whose text is written with style 126 (ISO 8601, every digit kept), so that a
#: split key read as text casts back to the value it came from.
_DATE_TIME = ("date", "time", "datetime", "datetime2", "smalldatetime", "datetimeoffset")

#: Bounds of these arrive as Python ``str()`` of a landed value (a head key), which SQL
#: Server's ``datetime`` cannot read with more than 3 fractional digits; ``datetime2``
#: reads it exactly, and the value of such a column fits ``datetime2`` exactly.
_VIA_DATETIME2 = ("datetime", "smalldatetime")


#: What pymssql reads as a placeholder in a statement run with parameters (it has no
#: escape: ``%%`` stays two characters), and a quoted part of T-SQL, where it is left.
_PLACEHOLDER = re.compile(r"('(?:[^']|'')*'|\[(?:[^\]]|\]\])*\])|%(?=[sd])")


def mssql_text(sql: str) -> str:
    """T-SQL of the user's (a shard expression) as it goes into a statement run with
    parameters: pymssql reads ``%s`` and ``%d`` as placeholders, so an operator ``%``
    right before a name (``id%shards``) gets a space, which T-SQL reads the same. In a
    string literal or a bracketed name a ``%s`` cannot be written this way; the statement
    then fails naming pymssql's error.

    >>> mssql_text("id%shards + n % 4 + len('%s')")
    "id% shards + n % 4 + len('%s')"
    """
    return _PLACEHOLDER.sub(lambda m: m.group(1) or "% ", sql)


def _base(data_type: str) -> str:
    return data_type.split("(", 1)[0].strip().lower()


def _cast(data_type: str) -> str:
    if _base(data_type) in _VIA_DATETIME2:
        return f"cast(cast(%s as datetime2) as {data_type})"
    return f"cast(%s as {data_type})"


def keyset(
    keys: Sequence[str], types: Sequence[str], op: str, bound: Sequence[Any]
) -> tuple[str, list[Any]]:
    """``(keys) op (bound)`` in key order, for ``op`` one of ``> >= < <=``, without
    row values: ``a > x or (a = x and b > y)``, led by ``a >= x`` (``a <= x``) so that
    SQL Server can seek the key's index on its first column.

    >>> sql, params = keyset(["a", "b"], ["int", "int"], ">", ["1", "2"])
    >>> sql.replace("cast(%s as int)", "?")
    '(a >= ? and (a > ? or (a = ? and b > ?)))'
    >>> params
    ['1', '1', '1', '2']
    """
    strict = op[0]
    values = [None if v is None else str(v) for v in bound]
    last = len(keys) - 1
    sql, params = f"{keys[last]} {op} {_cast(types[last])}", [values[last]]
    for i in range(last - 1, -1, -1):
        value = _cast(types[i])
        sql = f"({keys[i]} {strict} {value} or ({keys[i]} = {value} and {sql}))"
        params = [values[i], values[i], *params]
    if last > 0:
        sql = f"({keys[0]} {strict}= {_cast(types[0])} and {sql})"
        params = [values[0], *params]
    return sql, params


class SourceReader:
    """T-SQL for a request's chunks on the feed's source table (the same statements as
    :class:`._snapshot_plan.SourceReader`, PostgreSQL's)."""

    def __init__(self, info: SourceFeed, shard_expression: str | None) -> None:
        if info.payload is None:
            raise ChangefeedSourceError(
                f"a snapshot lands source rows: land feed {info.feed_id} with payload=true "
                "(changefeed land --payload)"
            )
        for key in info.keys:
            if not _TYPE.fullmatch(key.db_type.strip()):
                raise ChangefeedSourceError(
                    f"feed {info.feed_id}: the key column {key.name} is registered with type "
                    f"{key.db_type!r}, which a snapshot cannot cast its key bounds to: the "
                    "registry row's keys should hold a type as setup_feed writes it (bigint, "
                    "nvarchar(40), decimal(12,2)); was it edited by hand?"
                )
            if "binary" in _base(key.db_type):
                raise ChangefeedSourceError(
                    f"feed {info.feed_id}: the key column {key.name} is {key.db_type}; "
                    "snapshots of SQL Server feeds support keys of number, text, date and "
                    "time and uniqueidentifier types (a binary key has no text form to "
                    "plan and resume chunks by)"
                )
        self.info = info
        self.shard_expression = shard_expression
        self._shard_sql = None if shard_expression is None else mssql_text(shard_expression)
        self.keys = [f"s.{quote_mssql(k.name)}" for k in info.keys]
        self.types = [k.db_type.strip() for k in info.keys]
        self.columns = [f"s.{quote_mssql(c.name)}" for c in info.payload]

    def where(self, shard: int, chunk_or_range: Chunk) -> tuple[str, list[Any]]:
        """The predicate of a chunk (or of a whole request, as a chunk with index -1)."""

        def compare(op: str, bound: Sequence[Any]) -> tuple[str, list[Any]]:
            return keyset(self.keys, self.types, op, bound)

        terms, params = chunk_terms(self._shard_sql, shard, chunk_or_range, compare)
        return (" and ".join(terms) or "1 = 1"), params

    def _order(self) -> str:
        return ", ".join(self.keys)

    def chunk_sql(self, shard: int, chunk: Chunk) -> tuple[str, list[Any]]:
        where, params = self.where(shard, chunk)
        select = ", ".join([*self.keys, *self.columns])
        return (
            f"select {select} from {self.info.info.source} as s where {where} "
            f"order by {self._order()}",
            params,
        )

    def sample_sql(self, shard: int, whole: Chunk, percent: float | None) -> tuple[str, list[Any]]:
        where, params = self.where(shard, whole)
        texts = ", ".join(
            f"convert(nvarchar(4000), {k}, 126)" if _base(t) in _DATE_TIME
            else f"cast({k} as nvarchar(4000))"
            for k, t in zip(self.keys, self.types, strict=True)
        )  # fmt: skip
        sample = f" tablesample system ({percent:.6f} percent)" if percent is not None else ""
        # ORDER BY names the table's columns (s.), not the text outputs, which sort as text.
        return (
            f"select {texts} from {self.info.info.source} as s{sample} where {where} "
            f"order by {self._order()}",
            params,
        )


class SqlServerStatements(ClientRequests):
    """A snapshot's database side on SQL Server
    (:class:`~changefeed.dialects.base.SnapshotStatements`); the requests through
    :class:`~changefeed.client.SqlServerFeed`."""

    feed_class = client.SqlServerFeed

    def reader(self, info: SourceFeed, shard_expression: str | None) -> SourceReader:
        return SourceReader(info, shard_expression)

    def shard_expression(self, conn: Any, info: SourceFeed) -> str | None:
        _, rows = client.execute(
            conn,
            f"select options from {quote_mssql(info.changefeed_schema)}.[feeds] where feed_id = %s",
            (info.feed_id,),
        )
        raw = rows[0][0] if rows else None
        options = json.loads(raw) if isinstance(raw, str) and raw else {}
        if options.get("capture") == "trigger" and options.get("shard"):
            return str(options["shard"])
        return None

    def estimated_rows(self, conn: Any, source: str) -> int:
        """The table's row count as SQL Server keeps it (heap or clustered index)."""
        _, rows = client.execute(
            conn,
            "select sum(p.rows) from sys.partitions as p "
            "where p.object_id = object_id(%s) and p.index_id in (0, 1)",
            (source,),
        )
        return int(rows[0][0]) if rows and rows[0][0] is not None else -1

    def fetch_all(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return client.execute(conn, sql, tuple(params))[1]

    def fetch_batches(
        self, conn: Any, sql: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        cur = conn.cursor()
        try:
            cur.execute(sql, tuple(params))
            while rows := cur.fetchmany(size):
                yield [tuple(r) for r in rows]
        finally:
            cur.close()

    def arrow_reader(self, conn: Any, uri: str, layout: RowLayout) -> ArrowChunkReader | None:
        """None: pymssql reads rows (no direct Arrow read of SQL Server here)."""
        return None
