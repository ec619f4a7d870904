"""PostgreSQL access of the data source (psycopg 3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from changefeed.spark.datasource._backend import (
    Backend,
    Connection,
    FeedInfo,
    Row,
    parse_keys,
    quote_pg,
)
from changefeed.spark.datasource._errors import ChangefeedSourceError
from changefeed.spark.datasource._positions import ZERO
from changefeed.spark.datasource._types import Column


class PostgresBackend(Backend):
    dialect = "postgres"

    def __init__(self, connection: Connection, changefeed_schema: str) -> None:
        super().__init__(connection, changefeed_schema)
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the postgres extra is missing
            raise ChangefeedSourceError(
                "reading a PostgreSQL feed needs psycopg: pip install 'changefeed[postgres]'"
            ) from exc
        extra: dict[str, Any] = {}
        if "connect_timeout" not in connection.uri:
            extra["connect_timeout"] = 15
        try:
            self.conn: Any = psycopg.connect(
                connection.uri, autocommit=True, application_name="changefeed-spark", **extra
            )
        except psycopg.Error as exc:
            raise ChangefeedSourceError(
                f"cannot connect to PostgreSQL at {connection.display}: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        self._psycopg = psycopg
        self._queries: dict[tuple[str, str], str] = {}

    # -- helpers ---------------------------------------------------------------------

    def _q(self, name: str) -> str:
        return f"{quote_pg(self.changefeed_schema)}.{quote_pg(name)}"

    def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    # -- Backend ---------------------------------------------------------------------

    def describe(self, feed_id: str, payload: bool) -> FeedInfo:
        registry = self._q("feeds")
        try:
            rows = self._fetch(
                f"select mode, keys, names, source_schema, source_table from {registry} "
                "where feed_id = %s",
                (feed_id,),
            )
        except self._psycopg.errors.UndefinedTable:
            raise ChangefeedSourceError(
                f"{self.connection.display} has no feed registry {self.changefeed_schema}.feeds: "
                f"no feed is set up in this database (run changefeed.setup_feed), or the "
                f"changefeed schema is not {self.changefeed_schema!r} (option changefeedSchema)"
            ) from None
        if not rows:
            known = [r[0] for r in self._fetch(f"select feed_id from {registry} order by 1")]
            raise ChangefeedSourceError(
                f"unknown feed {feed_id!r} in {self.connection.display}: it is not in "
                f"{self.changefeed_schema}.feeds (set it up with changefeed.setup_feed). "
                f"Known feeds: {', '.join(known) or 'none'}"
            )
        mode, keys, names, source_schema, source_table = rows[0]
        info = FeedInfo(
            dialect=self.dialect,
            feed_id=feed_id,
            mode=str(mode),
            changefeed_schema=self.changefeed_schema,
            source_schema=str(source_schema),
            source_table=str(source_table),
            keys=parse_keys(keys),
            names=dict(names or {}),
        )
        if not payload:
            return info
        columns = self._fetch(
            "select a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
            "from pg_catalog.pg_attribute as a "
            "where a.attrelid = pg_catalog.to_regclass(%s) and a.attnum > 0 "
            "and not a.attisdropped order by a.attnum",
            (f"{quote_pg(info.source_schema)}.{quote_pg(info.source_table)}",),
        )
        if not columns:
            raise ChangefeedSourceError(
                f"payload=true: the source table {info.source_schema}.{info.source_table} of "
                f"feed {feed_id} does not exist or cannot be seen by this user"
            )
        return FeedInfo(**{**info.__dict__, "payload": tuple(Column(n, t) for n, t in columns)})

    def shards(self, info: FeedInfo) -> list[int]:
        rows = self._fetch(f"select shard_id from {self._q(info.name('state'))} order by shard_id")
        return [int(r[0]) for r in rows]

    def safe_points(self, info: FeedInfo, shards: Sequence[int]) -> dict[int, bytes]:
        # One statement, one snapshot for all shards.
        rows = self._fetch(
            "select s.shard_id, sp.safe_point "
            "from pg_catalog.unnest(%s::integer[]) as s(shard_id) "
            f"cross join lateral {self._q(info.name('safe_point'))}(s.shard_id) as sp",
            (list(shards),),
        )
        found = {int(shard): bytes(point) if point is not None else ZERO for shard, point in rows}
        return {shard: found.get(shard, ZERO) for shard in shards}

    def move_outbox(self, info: FeedInfo, shards: Sequence[int]) -> None:
        if info.mode != "outbox":
            return
        for shard in shards:
            with self.conn.cursor() as cur:
                cur.execute(f"call {self._q(info.name('move_outbox'))}(%s)", (shard,))

    def read_page(self, info: FeedInfo, shard: int, cursor: bytes, page_size: int) -> list[Row]:
        return self._fetch(self._page_sql(info), (shard, cursor, page_size))

    def _page_sql(self, info: FeedInfo) -> str:
        key = (info.feed_id, "payload" if info.payload is not None else "plain")
        if key not in self._queries:
            self._queries[key] = page_sql(info)
        return self._queries[key]

    def close(self) -> None:
        self.conn.close()


def page_sql(info: FeedInfo) -> str:
    """``read_feed`` for one page, and with a payload the source row joined by key."""
    schema = quote_pg(info.changefeed_schema)
    read_feed = f"{schema}.{quote_pg(info.name('read_feed'))}(%s, %s, %s)"
    keys = [quote_pg(c.name) for c in info.keys]
    select = ["f.shard_id", "f.ulid", *[f"f.{k}" for k in keys]]
    if info.payload is None:
        return f"select {', '.join(select)} from {read_feed} as f order by f.ulid"
    source = f"{quote_pg(info.source_schema)}.{quote_pg(info.source_table)}"
    on = " and ".join(f"s.{k} = f.{k}" for k in keys)
    select.append(f"(s.{keys[0]} is not null) as row_exists")
    select += [f"s.{quote_pg(c.name)}" for c in info.payload]
    return (
        f"select {', '.join(select)} from {read_feed} as f "
        f"left join {source} as s on {on} order by f.ulid"
    )
