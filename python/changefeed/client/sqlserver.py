"""SQL Server calls of a feed (pymssql; FreeTDS ships inside its wheel).

The start of a SQL Server client: connecting, and the statements the Spark source runs
(the registry entry, the source table's columns, the safe points, the shards, a page of
``read_feed``, a probe for events, and the source rows of a page's keys). Each statement
is written once, here; ``tests/test_source_sqlserver_queries.py`` pins every one (SQL
Server cannot run on the CI machine) and ``tests/sqlserver_live`` runs them on a real
server. PostgresFeed's full API (writing, barriers) is not here yet.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from changefeed.client.core import ZERO_ULID, FeedInfo, KeyColumn, quote_mssql, redact
from changefeed.client.errors import CannotConnect, ChangefeedError, FeedNotFound

Row = tuple[Any, ...]

#: Source rows are looked up in chunks of this many keys (one VALUES list per statement).
PAYLOAD_CHUNK = 500

#: Query parameters of an ``mssql://`` URI passed on to ``pymssql.connect``.
_PASSTHROUGH = {"tds_version": str, "login_timeout": int, "timeout": int, "charset": str,
                "appname": str, "encryption": str}  # fmt: skip

#: SQL Server's error number for "Invalid object name".
_INVALID_OBJECT = 208


def connect_arguments(uri: str, application_name: str = "changefeed") -> dict[str, Any]:
    """``pymssql.connect`` keyword arguments of an ``mssql://`` URI.

    >>> args = connect_arguments("mssql://sa:p%40ss@db.example:1433/shop?tds_version=7.4")
    >>> sorted(args.items())  # doctest: +NORMALIZE_WHITESPACE
    [('appname', 'changefeed'), ('autocommit', True), ('database', 'shop'),
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
        "appname": application_name,
    }
    if parts.port:
        args["port"] = parts.port
    for name, values in urllib.parse.parse_qs(parts.query).items():
        if name not in _PASSTHROUGH:
            raise CannotConnect(
                f"mssql:// URI parameter {name!r} is not supported; supported: "
                f"{', '.join(sorted(_PASSTHROUGH))}"
            )
        args[name] = _PASSTHROUGH[name](values[-1])
    return args


def connect(
    uri: str,
    *,
    application_name: str = "changefeed",
    connect: Callable[..., Any] | None = None,
) -> Any:
    """An autocommit pymssql connection (``connect`` replaces ``pymssql.connect``).

    Raises :class:`~changefeed.client.CannotConnect` naming the server (password
    redacted) and the cause.
    """
    if connect is None:
        try:
            import pymssql
        except ImportError:  # pragma: no cover - the sqlserver extra is missing
            raise CannotConnect(
                "reading a SQL Server feed needs pymssql: pip install 'changefeed[sqlserver]'"
            ) from None
        connect = pymssql.connect
    arguments = connect_arguments(uri, application_name)
    try:
        return connect(**arguments)
    except Exception as exc:
        raise CannotConnect(
            f"cannot connect to SQL Server at {redact(uri)}: {error_text(exc)}"
        ) from None


def execute(conn: Any, sql: str, params: Row | None = None) -> tuple[list[str], list[Row]]:
    """Run one statement; returns its column names and rows (none for no result set)."""
    cur = conn.cursor()
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


def registry_entry(conn: Any, feed_id: str, schema: str = "changefeed") -> FeedInfo:
    """The feed's row of ``[<schema>].[feeds]``; :class:`FeedNotFound` names the known feeds."""
    registry = f"{quote_mssql(schema)}.{quote_mssql('feeds')}"
    try:
        _, rows = execute(
            conn,
            f"select mode, keys, names, source_schema, source_table from {registry} "
            "where feed_id = %s",
            (feed_id,),
        )
    except Exception as exc:
        if error_number(exc) != _INVALID_OBJECT:
            raise
        raise FeedNotFound(
            f"there is no feed registry {registry}: no feed is set up in this database "
            f"(run changefeed.setup_feed), or the changefeed schema is not {schema!r}"
        ) from None
    if not rows:
        _, known = execute(conn, f"select feed_id from {registry} order by feed_id")
        raise FeedNotFound(
            f"unknown feed {feed_id!r}: it is not in {registry} (set it up with "
            f"changefeed.setup_feed). Known feeds: {', '.join(str(r[0]) for r in known) or 'none'}"
        )
    mode, keys, names, source_schema, source_table = rows[0]
    return FeedInfo(
        feed_id=feed_id,
        schema=schema,
        mode=str(mode),
        keys=parse_keys(keys),
        names=json.loads(names) if isinstance(names, str) else dict(names or {}),
        dialect="sqlserver",
        source_schema=str(source_schema),
        source_table=str(source_table),
    )


def parse_keys(raw: Any) -> tuple[KeyColumn, ...]:
    """Key columns from a registry's ``keys`` JSON.

    Accepts a list of ``{"name", "data_type", ...}`` objects or of
    ``[name, data_type, ...]`` lists (SQL Server's key signature).

    >>> parse_keys('[["order_id", "bigint"]]')
    (KeyColumn(name='order_id', data_type='bigint', collation=None),)
    """
    value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    columns: list[KeyColumn] = []
    for item in value or []:
        if isinstance(item, Mapping):
            columns.append(
                KeyColumn(str(item["name"]), str(item["data_type"]), item.get("collation"))
            )
        elif isinstance(item, (list, tuple)) and len(item) >= 2:
            columns.append(KeyColumn(str(item[0]), str(item[1])))
        else:
            raise ChangefeedError(f"the feed registry holds an unreadable key column {item!r}")
    return tuple(columns)


def source_columns(conn: Any, info: FeedInfo) -> list[tuple[str, str]]:
    """``(name, type)`` of every column of the feed's source table, in order (empty if
    the table does not exist or this user cannot see it)."""
    _, rows = execute(
        conn,
        "select c.name, t.name, c.max_length, c.precision, c.scale "
        "from sys.columns as c join sys.types as t on t.user_type_id = c.user_type_id "
        "where c.object_id = object_id(%s) order by c.column_id",
        (info.source,),
    )
    return [(str(n), _type_text(str(t), p, s)) for n, t, _, p, s in rows]


def safe_points(conn: Any, info: FeedInfo) -> dict[int, bytes]:
    """The safe point of every shard with a state row (``exec [safe_point:<feed>]``)."""
    names, rows = execute(conn, f"exec {_object(info, 'safe_point')}")
    shard_at, point_at = names.index("shard_id"), names.index("safe_point")
    return {int(r[shard_at]): bytes(r[point_at]) if r[point_at] is not None else ZERO_ULID
            for r in rows}  # fmt: skip


def shards(conn: Any, info: FeedInfo) -> list[int]:
    """Shards with a state row, and in outbox mode shards with unmoved outbox rows."""
    _, rows = execute(conn, f"exec {_object(info, 'shards')}")
    return [int(r[0]) for r in rows]


def has_events(conn: Any, info: FeedInfo, shard: int, after: bytes, upto: bytes) -> bool:
    """Whether ``shard`` has an event with ``after < ulid <= upto`` (one index probe)."""
    _, rows = execute(
        conn,
        f"select top (1) 1 from {_object(info, 'feed')} "
        "where shard_id = %s and ulid > %s and ulid <= %s",
        (shard, after, upto),
    )
    return bool(rows)


def read_feed(conn: Any, info: FeedInfo, shard: int, cursor: bytes, page_size: int) -> list[Row]:
    """One page of ``read_feed`` after ``cursor`` as ``(shard, ulid, *keys)``, in ULID order.

    In outbox mode, a call at the head moves the outbox first (the procedure does).
    """
    names, rows = execute(
        conn,
        f"exec {_object(info, 'read_feed')} @shard_id = %s, @cursor = %s, @page_size = %s",
        (shard, cursor, page_size),
    )
    if not rows:
        return []
    lowered = [n.lower() for n in names]
    ulid_at = lowered.index("ulid")
    key_at = [lowered.index(name.lower()) for name in info.key_names]
    page = [(shard, bytes(r[ulid_at]), *(r[i] for i in key_at)) for r in rows]
    page.sort(key=lambda row: row[1])
    return page


def source_rows(
    conn: Any, info: FeedInfo, columns: Sequence[str], keys: Sequence[Row]
) -> dict[Row, Row]:
    """The source table's ``columns`` of each key (in the feed's key order) that still
    has a row, key -> values, looked up :data:`PAYLOAD_CHUNK` keys per statement."""
    found: dict[Row, Row] = {}
    distinct = list(dict.fromkeys(keys))
    nkeys = len(info.keys)
    for start in range(0, len(distinct), PAYLOAD_CHUNK):
        chunk = distinct[start : start + PAYLOAD_CHUNK]
        _, rows = execute(
            conn, source_rows_sql(info, columns, len(chunk)), tuple(v for k in chunk for v in k)
        )
        for row in rows:
            found[tuple(row[:nkeys])] = tuple(row[nkeys:])
    return found


def source_rows_sql(info: FeedInfo, columns: Sequence[str], count: int) -> str:
    """The statement that fetches the source rows of ``count`` keys (one VALUES list)."""
    keys = [quote_mssql(name) for name in info.key_names]
    row = "(" + ", ".join(["%s"] * len(keys)) + ")"
    values = ", ".join([row] * count)
    on = " and ".join(f"s.{k} = v.{k}" for k in keys)
    selected = [f"v.{k}" for k in keys] + [f"s.{quote_mssql(c)}" for c in columns]
    return (
        f"select {', '.join(selected)} from (values {values}) as v({', '.join(keys)}) "
        f"join {info.source} as s on {on}"
    )


def error_number(exc: BaseException) -> int | None:
    """A pymssql error's SQL Server error number, if it carries one."""
    if exc.args and isinstance(exc.args[0], int):
        return int(exc.args[0])
    return None


def error_text(exc: BaseException) -> str:
    """A pymssql error's message (its arguments are bytes)."""
    parts = []
    for arg in exc.args:
        parts.append(arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg))
    return " ".join(parts).strip() or type(exc).__name__


def _object(info: FeedInfo, kind: str) -> str:
    return f"{quote_mssql(info.schema)}.{quote_mssql(info.name(kind))}"


def _type_text(name: str, precision: Any, scale: Any) -> str:
    if name.lower() in ("decimal", "numeric"):
        return f"{name}({int(precision)},{int(scale)})"
    return name
