"""SQL Server access of the data source, through its client (:mod:`.client`).

The statements are the client's (``tests/test_source_sqlserver_queries.py`` pins them);
this module turns its answers and errors into the data source's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from changefeed.client.core import ZERO_ULID
from changefeed.dialects.base import MAX_MOVES, MOVE_ROWS, Backend
from changefeed.dialects.feed import Connection, Row, SourceFeed
from changefeed.dialects.rows import Column
from changefeed.dialects.sqlserver import client
from changefeed.errors import ChangefeedError, ChangefeedSourceError


class SqlServerBackend(Backend):
    dialect = "sqlserver"

    def __init__(
        self,
        connection: Connection,
        changefeed_schema: str,
        *,
        connect: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(connection, changefeed_schema)
        try:
            self.conn: Any = client.connect(
                connection.uri, application_name="changefeed-spark", connect=connect
            )
        except ChangefeedError as exc:
            raise ChangefeedSourceError(str(exc)) from None

    def describe(self, feed_id: str, payload: bool) -> SourceFeed:
        try:
            info = client.registry_entry(self.conn, feed_id, self.changefeed_schema)
        except ChangefeedError as exc:
            raise ChangefeedSourceError(
                f"{self.connection.display}: {exc} (option changefeedSchema names the schema)"
            ) from None
        if not payload:
            return SourceFeed(info)
        columns = client.source_columns(self.conn, info)
        if not columns:
            raise ChangefeedSourceError(
                f"payload=true: the source table {info.source_schema}.{info.source_table} of "
                f"feed {feed_id} does not exist or cannot be seen by this user"
            )
        return SourceFeed(info, tuple(Column(n, t, i) for n, t, i in columns))

    def shards(self, info: SourceFeed) -> list[int]:
        """Shards with a state row, and in outbox mode shards with unmoved outbox rows
        (``[shards:<feed>]``, which the reader role may execute)."""
        if "shards" not in info.names:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} was set up by an older version of the package and cannot "
                "list its shards: run changefeed.upgrade_feed for it, or name the shards with "
                "the option shards, e.g. .option('shards', '0,1,2')"
            )
        return client.shards(self.conn, info.info)

    def horizons(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        return client.horizons(self.conn, info.info, shards)

    def save_cursor(self, info: SourceFeed, consumer: str, shard: int, cursor: bytes) -> None:
        client.save_cursor(self.conn, info.info, consumer, shard, cursor)

    def safe_points(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        found = client.safe_points(self.conn, info.info)
        return {shard: found.get(shard, ZERO_ULID) for shard in shards}

    def move_outbox(self, info: SourceFeed, shards: Sequence[int]) -> None:
        """Publish each shard's committed outbox rows, as the PostgreSQL backend does:
        ``read_feed`` moves when called at the head, so it is called from the shard's safe
        point until a call returns nothing (at most MAX_MOVES calls of MOVE_ROWS events;
        the pages are dropped, the plan reads them again within its range)."""
        if info.mode != "outbox":
            return
        heads = client.safe_points(self.conn, info.info)
        for shard in shards:
            start = heads.get(shard, ZERO_ULID)
            client.move_outbox(self.conn, info.info, shard, start, MOVE_ROWS, MAX_MOVES)

    def has_events(self, info: SourceFeed, shard: int, after: bytes, upto: bytes) -> bool:
        return client.has_events(self.conn, info.info, shard, after, upto)

    def read_page(self, info: SourceFeed, shard: int, cursor: bytes, page_size: int) -> list[Row]:
        page = client.read_feed(self.conn, info.info, shard, cursor, page_size)
        if not page or info.payload is None:
            return page
        nkeys = len(info.keys)
        columns = [c.name for c in info.payload]
        found = client.source_rows(self.conn, info.info, columns, [r[2 : 2 + nkeys] for r in page])
        missing = (None,) * len(columns)
        out: list[Row] = []
        for row in page:
            values = found.get(tuple(row[2 : 2 + nkeys]))
            out.append((*row, values is not None, *(values if values is not None else missing)))
        return out

    def barrier_wait(self, info: SourceFeed, shard: int, timeout_s: float) -> None:
        client.SqlServerFeed.from_info(info.info).barrier_wait(self.conn, shard, timeout_s)

    def registered_feeds(self) -> list[str]:
        try:
            return sorted(client.registered_feeds(self.conn, self.changefeed_schema))
        except ChangefeedError as exc:
            raise ChangefeedSourceError(str(exc)) from None

    def try_writer_lock(self, table: str) -> str | None:
        return client.try_writer_lock(self.conn, table)

    def source_identity(self) -> str:
        return client.source_identity(self.conn)

    def close(self) -> None:
        self.conn.close()
