"""SQL Server access of the data source (pymssql; FreeTDS ships inside its wheel).

Only the statements differ from PostgreSQL; ``tests/test_source_sqlserver_queries.py``
pins every statement this module sends (SQL Server cannot run on the CI machine), and
``tests/sqlserver_live/test_spark_source_live.py`` runs them on a real server.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from changefeed.client.core import ZERO_ULID, quote_mssql
from changefeed.spark.source._backend import (
    Backend,
    Connection,
    FeedInfo,
    Row,
    parse_keys,
)
from changefeed.spark.source._errors import ChangefeedSourceError
from changefeed.spark.source._types import Column

#: Source rows are looked up for a page in chunks of this many keys (one VALUES list).
PAYLOAD_CHUNK = 500

#: Query parameters of an ``mssql://`` URI passed on to ``pymssql.connect``.
_PASSTHROUGH = {"tds_version": str, "login_timeout": int, "timeout": int, "charset": str,
                "appname": str, "encryption": str}  # fmt: skip


def connect_arguments(uri: str) -> dict[str, Any]:
    """``pymssql.connect`` keyword arguments of an ``mssql://`` URI.

    >>> args = connect_arguments("mssql://sa:p%40ss@db.example:1433/shop?tds_version=7.4")
    >>> sorted(args.items())  # doctest: +NORMALIZE_WHITESPACE
    [('appname', 'changefeed-spark'), ('autocommit', True), ('database', 'shop'),
     ('login_timeout', 15), ('password', 'p@ss'), ('port', 1433), ('server', 'db.example'),
     ('tds_version', '7.4'), ('user', 'sa')]
    """
    parts = urllib.parse.urlsplit(uri)
    args: dict[str, Any] = {
        "server": parts.hostname or "localhost",
        "user": urllib.parse.unquote(parts.username or ""),
        "password": urllib.parse.unquote(parts.password or ""),
        "database": urllib.parse.unquote(parts.path.lstrip("/")),
        "autocommit": True,
        "login_timeout": 15,
        "appname": "changefeed-spark",
    }
    if parts.port:
        args["port"] = parts.port
    for name, values in urllib.parse.parse_qs(parts.query).items():
        if name not in _PASSTHROUGH:
            raise ChangefeedSourceError(
                f"mssql:// URI parameter {name!r} is not supported; supported: "
                f"{', '.join(sorted(_PASSTHROUGH))}"
            )
        args[name] = _PASSTHROUGH[name](values[-1])
    return args


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
        if connect is None:
            try:
                import pymssql
            except ImportError as exc:  # pragma: no cover - the sqlserver extra is missing
                raise ChangefeedSourceError(
                    "reading a SQL Server feed needs pymssql: pip install 'changefeed[sqlserver]'"
                ) from exc
            connect = pymssql.connect
        try:
            self.conn: Any = connect(**connect_arguments(connection.uri))
        except ChangefeedSourceError:
            raise
        except Exception as exc:
            raise ChangefeedSourceError(
                f"cannot connect to SQL Server at {connection.display}: {_message(exc)}"
            ) from None

    def _q(self, name: str) -> str:
        return f"{quote_mssql(self.changefeed_schema)}.{quote_mssql(name)}"

    def _execute(
        self, sql: str, params: tuple[Any, ...] | None = None
    ) -> tuple[list[str], list[Row]]:
        cur = self.conn.cursor()
        try:
            if params is None:
                cur.execute(sql)
            else:
                cur.execute(sql, params)
            if not cur.description:
                return [], []
            names = [str(d[0]) for d in cur.description]
            return names, [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()

    def describe(self, feed_id: str, payload: bool) -> FeedInfo:
        registry = self._q("feeds")
        try:
            _, rows = self._execute(
                f"select mode, keys, names, source_schema, source_table from {registry} "
                "where feed_id = %s",
                (feed_id,),
            )
        except Exception as exc:
            if _number(exc) == 208:  # invalid object name
                raise ChangefeedSourceError(
                    f"{self.connection.display} has no feed registry "
                    f"[{self.changefeed_schema}].[feeds]: no feed is set up in this database "
                    f"(run changefeed.setup_feed), or the changefeed schema is not "
                    f"{self.changefeed_schema!r} (option changefeedSchema)"
                ) from None
            raise
        if not rows:
            _, known = self._execute(f"select feed_id from {registry} order by feed_id")
            raise ChangefeedSourceError(
                f"unknown feed {feed_id!r} in {self.connection.display}: it is not in "
                f"[{self.changefeed_schema}].[feeds] (set it up with changefeed.setup_feed). "
                f"Known feeds: {', '.join(str(r[0]) for r in known) or 'none'}"
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
            names=json.loads(names) if isinstance(names, str) else dict(names or {}),
        )
        if not payload:
            return info
        source = f"{quote_mssql(info.source_schema)}.{quote_mssql(info.source_table)}"
        _, columns = self._execute(
            "select c.name, t.name, c.max_length, c.precision, c.scale "
            "from sys.columns as c join sys.types as t on t.user_type_id = c.user_type_id "
            "where c.object_id = object_id(%s) order by c.column_id",
            (source,),
        )
        if not columns:
            raise ChangefeedSourceError(
                f"payload=true: the source table {info.source_schema}.{info.source_table} of "
                f"feed {feed_id} does not exist or cannot be seen by this user"
            )
        payload_columns = tuple(
            Column(str(n), _type_text(str(t), p, s)) for n, t, _, p, s in columns
        )
        return FeedInfo(**{**info.__dict__, "payload": payload_columns})

    def _all_safe_points(self, info: FeedInfo) -> dict[int, bytes]:
        names, rows = self._execute(f"exec {self._q(info.name('safe_point'))}")
        shard_at, point_at = names.index("shard_id"), names.index("safe_point")
        return {int(r[shard_at]): bytes(r[point_at]) if r[point_at] is not None else ZERO_ULID
                for r in rows}  # fmt: skip

    def shards(self, info: FeedInfo) -> list[int]:
        """Shards with a state row, and in outbox mode shards with unmoved outbox rows
        (``[shards:<feed>]``, which the reader role may execute)."""
        if "shards" not in info.names:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} was set up by an older version of the package and cannot "
                "list its shards: run changefeed.upgrade_feed for it, or name the shards with "
                "the option shards, e.g. .option('shards', '0,1,2')"
            )
        _, rows = self._execute(f"exec {self._q(info.name('shards'))}")
        return [int(r[0]) for r in rows]

    def safe_points(self, info: FeedInfo, shards: Sequence[int]) -> dict[int, bytes]:
        found = self._all_safe_points(info)
        return {shard: found.get(shard, ZERO_ULID) for shard in shards}

    def move_outbox(self, info: FeedInfo, shards: Sequence[int]) -> None:
        # read_feed moves the outbox when the cursor is at the head: a call with the
        # current head as cursor publishes what is committed, and its page is dropped
        # (the caller reads it again within its planned range).
        if info.mode != "outbox":
            return
        heads = self._all_safe_points(info)
        for shard in shards:
            self._execute(
                self._read_feed_sql(info),
                (shard, heads.get(shard, ZERO_ULID), 1),
            )

    def has_events(self, info: FeedInfo, shard: int, after: bytes, upto: bytes) -> bool:
        _, rows = self._execute(
            f"select top (1) 1 from {self._q(info.name('feed'))} "
            "where shard_id = %s and ulid > %s and ulid <= %s",
            (shard, after, upto),
        )
        return bool(rows)

    def _read_feed_sql(self, info: FeedInfo) -> str:
        name = self._q(info.name("read_feed"))
        return f"exec {name} @shard_id = %s, @cursor = %s, @page_size = %s"

    def read_page(self, info: FeedInfo, shard: int, cursor: bytes, page_size: int) -> list[Row]:
        names, rows = self._execute(
            self._read_feed_sql(info),
            (shard, cursor, page_size),
        )
        if not rows:
            return []
        lowered = [n.lower() for n in names]
        ulid_at = lowered.index("ulid")
        key_at = [lowered.index(c.name.lower()) for c in info.keys]
        page = [(shard, bytes(r[ulid_at]), *(r[i] for i in key_at)) for r in rows]
        page.sort(key=lambda row: row[1])
        if info.payload is None:
            return page
        return self._with_payload(info, page)

    def _with_payload(self, info: FeedInfo, page: list[Row]) -> list[Row]:
        nkeys = len(info.keys)
        found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        distinct = list(dict.fromkeys(row[2 : 2 + nkeys] for row in page))
        for start in range(0, len(distinct), PAYLOAD_CHUNK):
            chunk = distinct[start : start + PAYLOAD_CHUNK]
            sql = payload_sql(info, len(chunk))
            _, rows = self._execute(sql, tuple(v for key in chunk for v in key))
            for row in rows:
                found[tuple(row[:nkeys])] = tuple(row[nkeys:])
        missing = (None,) * len(info.payload or ())
        out: list[Row] = []
        for row in page:
            values = found.get(tuple(row[2 : 2 + nkeys]))
            out.append((*row, values is not None, *(values if values is not None else missing)))
        return out

    def close(self) -> None:
        self.conn.close()


def payload_sql(info: FeedInfo, count: int) -> str:
    """The statement that fetches the source rows of ``count`` keys (one VALUES list)."""
    keys = [quote_mssql(c.name) for c in info.keys]
    row = "(" + ", ".join(["%s"] * len(keys)) + ")"
    values = ", ".join([row] * count)
    source = f"{quote_mssql(info.source_schema)}.{quote_mssql(info.source_table)}"
    on = " and ".join(f"s.{k} = v.{k}" for k in keys)
    columns = [f"v.{k}" for k in keys] + [f"s.{quote_mssql(c.name)}" for c in info.payload or ()]
    return (
        f"select {', '.join(columns)} from (values {values}) as v({', '.join(keys)}) "
        f"join {source} as s on {on}"
    )


def _type_text(name: str, precision: Any, scale: Any) -> str:
    if name.lower() in ("decimal", "numeric"):
        return f"{name}({int(precision)},{int(scale)})"
    return name


def _number(exc: Exception) -> int | None:
    if exc.args and isinstance(exc.args[0], int):
        return int(exc.args[0])
    return None


def _message(exc: Exception) -> str:
    parts = []
    for arg in exc.args:
        parts.append(arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg))
    return " ".join(parts).strip() or type(exc).__name__
