"""PostgreSQL's reads for the Spark source (the :class:`Backend` of a connection)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from changefeed.client.core import quote_pg
from changefeed.dialects.base import MAX_MOVES, MOVE_ROWS, Backend
from changefeed.dialects.feed import Connection, Row, SourceFeed
from changefeed.dialects.postgres.client import (
    PostgresFeed,
    connect,
    registered_feeds,
    source_identity,
    try_writer_lock,
)
from changefeed.dialects.rows import Column
from changefeed.errors import ChangefeedError, ChangefeedSourceError


class PostgresBackend(Backend):
    dialect = "postgres"

    def __init__(self, connection: Connection, changefeed_schema: str) -> None:
        super().__init__(connection, changefeed_schema)
        try:
            self.conn: Any = connect(connection.uri, application_name="changefeed-spark")
        except ChangefeedError as exc:
            raise ChangefeedSourceError(str(exc)) from None
        self._clients: dict[str, Any] = {}

    # -- helpers ---------------------------------------------------------------------

    def _q(self, name: str) -> str:
        return f"{quote_pg(self.changefeed_schema)}.{quote_pg(name)}"

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    # -- Backend ---------------------------------------------------------------------

    def _client(self, feed_id: str) -> Any:
        if feed_id not in self._clients:
            self._clients[feed_id] = PostgresFeed(feed_id, self.changefeed_schema)
        return self._clients[feed_id]

    def describe(self, feed_id: str, payload: bool) -> SourceFeed:
        try:
            registered = self._client(feed_id).info(self.conn)
        except ChangefeedError as exc:
            raise ChangefeedSourceError(
                f"unknown feed {feed_id!r} in {self.connection.display}: {exc}"
            ) from None
        if not payload:
            return SourceFeed(registered)
        rows = self._fetch(
            f"select source_schema, source_table from {self._q('feeds')} where feed_id = %s",
            (feed_id,),
        )
        source_schema, source_table = str(rows[0][0]), str(rows[0][1])
        columns = self._fetch(
            "select a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnum "
            "from pg_catalog.pg_attribute as a "
            "where a.attrelid = pg_catalog.to_regclass(%s) and a.attnum > 0 "
            "and not a.attisdropped order by a.attnum",
            (f"{quote_pg(source_schema)}.{quote_pg(source_table)}",),
        )
        if not columns:
            raise ChangefeedSourceError(
                f"payload=true: the source table {source_schema}.{source_table} of "
                f"feed {feed_id} does not exist or cannot be seen by this user"
            )
        # The client's registry read probes the image columns (FeedInfo.images), not the
        # option: row_image switched off keeps the images written while it was on.
        return SourceFeed(
            replace(registered, source_schema=source_schema, source_table=source_table),
            tuple(Column(str(n), str(t), int(i)) for n, t, i in columns),
            images=registered.images,
        )

    def shards(self, info: SourceFeed) -> list[int]:
        """Shards with a state row, and in outbox mode shards with unmoved outbox rows
        (``shards:<feed>``, which the reader role may call)."""
        if "shards" not in info.names:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} was set up by an older version of the package and cannot "
                "list its shards: run `dbt run-operation changefeed.upgrade_feed` for it, or "
                "name the shards with the option shards, e.g. .option('shards', '0,1,2')"
            )
        rows = self._fetch(f"select s.shard_id from {self._q(info.name('shards'))}() as s")
        return [int(r[0]) for r in rows]

    def safe_points(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        client = self._client(info.feed_id)
        return {shard: client.safe_point(self.conn, shard).safe_point for shard in shards}

    def move_outbox(self, info: SourceFeed, shards: Sequence[int]) -> None:
        """``move_outbox`` until a call moves less than a full batch: everything committed
        to the outbox before this call is then published (at most MAX_MOVES calls)."""
        if info.mode != "outbox":
            return
        client = self._client(info.feed_id)
        for shard in shards:
            for _ in range(MAX_MOVES):
                if client.move_outbox(self.conn, shard, max_rows=MOVE_ROWS) < MOVE_ROWS:
                    break

    def has_events(self, info: SourceFeed, shard: int, after: bytes, upto: bytes) -> bool:
        rows = self._fetch(
            f"select 1 from {self._q(info.name('feed'))} "
            "where shard_id = %s and ulid > %s and ulid <= %s limit 1",
            (shard, after, upto),
        )
        return bool(rows)

    def read_page(self, info: SourceFeed, shard: int, cursor: bytes, page_size: int) -> list[Row]:
        if info.payload is None:
            page = self._client(info.feed_id).read_page(self.conn, shard, cursor, page_size)
            return [(e.shard_id, e.ulid, *e.key) for e in page.events]
        return self._fetch(payload_page_sql(info), (shard, cursor, page_size))

    def horizons(self, info: SourceFeed, shards: Sequence[int]) -> dict[int, bytes]:
        if "retention" not in info.names or not shards:
            return {}  # set up by a package without retention: nothing was ever removed
        rows = self._fetch(
            f"select rt.shard_id, rt.horizon from {info.info.q('retention')} as rt "
            "where rt.shard_id = any(%s)",
            (list(shards),),
        )
        return {int(r[0]): bytes(r[1]) for r in rows}

    def save_cursor(self, info: SourceFeed, consumer: str, shard: int, cursor: bytes) -> None:
        self._client(info.feed_id).save_cursor(self.conn, consumer, shard, cursor)

    def barrier_wait(self, info: SourceFeed, shard: int, timeout_s: float) -> None:
        self._client(info.feed_id).barrier_wait(self.conn, shard, timeout_s)

    def registered_feeds(self) -> list[str]:
        try:
            return sorted(registered_feeds(self.conn, self.changefeed_schema))
        except ChangefeedError as exc:
            raise ChangefeedSourceError(str(exc)) from None

    def try_writer_lock(self, table: str) -> str | None:
        return try_writer_lock(self.conn, table)

    def source_identity(self) -> str:
        return source_identity(self.conn)

    def close(self) -> None:
        self.conn.close()


def payload_page_sql(info: SourceFeed) -> str:
    """One page of ``read_feed`` with the source row joined by key (payload=true).

    A feed with row images (``info.images``) takes an event's payload from its image
    (``jsonb_populate_record`` over the source's row type, so each column has its type),
    and its existence from the delete marker; only events without an image (``row_deleted``
    null: written before row_image was on) join back to the source.
    """
    read_feed = f"{info.info.q('read_feed')}(%s, %s, %s)"
    keys = [quote_pg(c.name) for c in info.keys]
    on = " and ".join(f"s.{k} = f.{k}" for k in keys)
    select = ["f.shard_id", "f.ulid", *[f"f.{k}" for k in keys]]
    columns = [quote_pg(c.name) for c in info.payload or ()]
    if not info.images:
        select.append(f"(s.{keys[0]} is not null) as row_exists")
        select += [f"s.{c}" for c in columns]
        return (
            f"select {', '.join(select)} from {read_feed} as f "
            f"left join {info.info.source} as s on {on} order by f.ulid"
        )
    select.append(
        f"case when f.row_deleted is null then s.{keys[0]} is not null "
        "else not f.row_deleted end as row_exists"
    )
    select += [f"case when f.row_deleted is null then s.{c} else i.{c} end" for c in columns]
    return (
        f"select {', '.join(select)} from {read_feed} as f "
        f"left join {info.info.source} as s on {on} and f.row_deleted is null "
        f"cross join lateral pg_catalog.jsonb_populate_record(null::{info.info.source}, "
        "f.row_image) as i order by f.ulid"
    )
