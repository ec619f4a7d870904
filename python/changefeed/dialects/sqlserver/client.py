"""SQL Server calls of a feed (pymssql; FreeTDS ships inside its wheel).

The SQL Server client: connecting, the statements the Spark source runs
(the registry entry, the source table's columns, the safe points, the shards, a page of
``read_feed``, a probe for events, and the source rows of a page's keys). Each statement
is written once, here; ``tests/test_source_sqlserver_queries.py`` pins every one (SQL
Server cannot run on the CI machine) and ``tests/sqlserver_live`` runs them on a real
server. :class:`SqlServerFeed` is PostgresFeed's API on top (writing, outbox, reading, safe
point, barrier, tombstone); its statements are pinned by ``tests/test_sqlserver_client.py``.
None of this has run against a real server on the CI machine: ``tests/sqlserver_live``
does, given ``CHANGEFEED_SQLSERVER_DSN``.

Connections must be in autocommit mode (:func:`connect` makes them so): pymssql's default
keeps a transaction open (``BEGIN TRAN`` at connect and after every commit), inside which
the lock call, ``read_feed`` on an outbox feed and ``tombstone`` refuse to run, and in
which their committed work would otherwise depend on the caller's commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from changefeed.client import checks as _checks
from changefeed.client.core import (
    ZERO_ULID,
    FeedInfo,
    KeyColumn,
    quote_mssql,
    redact,
    writer_lock_resource,
)
from changefeed.client.errors import (
    CannotConnect,
    ChangefeedError,
    DriverMissing,
    FeedNotFound,
    InvalidArgument,
    LockInTransaction,
    NoWriteInProgress,
    UlidRangeError,
    WriteTransactionBroken,
)
from changefeed.client.feed import (
    Barrier,
    BlockWrite,
    Event,
    FeedClient,
    Page,
    SafePoint,
    Snapshot,
    WriteId,
)
from changefeed.errors import by_sqlserver_error

__all__ = [
    "CAPTURE_LOST",
    "EVENT_CHUNK",
    "PAYLOAD_CHUNK",
    "PERMISSION_DENIED",
    "SNAPSHOT_COLUMNS",
    "TRANSACTION_BROKEN",
    "WRITER_LOCK_SQL",
    "Row",
    "SqlServerFeed",
    "SqlServerWrite",
    "call",
    "capture_state",
    "connect",
    "connect_arguments",
    "connect_reason",
    "context_key",
    "error_number",
    "error_text",
    "execute",
    "has_events",
    "held_write_sql",
    "horizons",
    "insert_events_sql",
    "lock_sql",
    "move_outbox",
    "object_name",
    "oldest_pending_age",
    "outbox_rows",
    "parse_keys",
    "publish_sql",
    "read_feed",
    "registered_feeds",
    "registry_entry",
    "release_sql",
    "safe_points",
    "save_cursor",
    "shards",
    "snapshots",
    "source_columns",
    "source_identity",
    "source_rows",
    "source_rows_sql",
    "translate",
    "translating",
    "try_writer_lock",
    "unread",
    "writer_lock_name",
]


Row = tuple[Any, ...]

#: Source rows are looked up in chunks of this many keys (one VALUES list per statement).
PAYLOAD_CHUNK = 500

#: Query parameters of an ``mssql://`` URI passed on to ``pymssql.connect``.
_PASSTHROUGH = {"tds_version": str, "login_timeout": int, "timeout": int, "charset": str,
                "appname": str, "encryption": str}  # fmt: skip

#: SQL Server's error numbers for "Invalid object name" and "permission was denied".
_INVALID_OBJECT = 208
PERMISSION_DENIED = 229


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
    password: str | None = None,
    connect: Callable[..., Any] | None = None,
) -> Any:
    """An autocommit pymssql connection (``connect`` replaces ``pymssql.connect``;
    ``password``, if given, replaces the URI's).

    Raises :class:`~changefeed.client.CannotConnect` naming the server (password
    redacted) and the cause.
    """
    if connect is None:
        try:
            import pymssql
        except ImportError:  # pragma: no cover - the sqlserver extra is missing
            raise DriverMissing(
                "pymssql is not installed; install the SQL Server extra: "
                "pip install 'changefeed[sqlserver]'"
            ) from None
        connect = pymssql.connect
    arguments = connect_arguments(uri, application_name)
    if password:
        arguments["password"] = password
    try:
        return connect(**arguments)
    except Exception as exc:
        raise CannotConnect(
            f"cannot connect to SQL Server at {redact(uri)}: {connect_reason(exc)}"
        ) from None


def connect_reason(exc: BaseException) -> str:
    """FreeTDS's reason a login failed, on one line (its "DB-Lib error message" headers
    and repeated lines dropped).

    >>> connect_reason(Exception(20009, b"DB-Lib error message 20009, severity 9:\\n"
    ...     b"Unable to connect: TDS server is unavailable\\nNet-Lib error during Connection "
    ...     b"refused (111)\\nDB-Lib error message 20009, severity 9:\\nUnable to connect: "
    ...     b"TDS server is unavailable\\n"))
    'Unable to connect: TDS server is unavailable; Net-Lib error during Connection refused (111)'
    """
    lines = _first_line_source(exc).splitlines()
    kept = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("DB-Lib error message")]
    return "; ".join(dict.fromkeys(kept)) or type(exc).__name__


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
    with _registry_exists(registry, schema):
        _, rows = execute(
            conn,
            f"select mode, keys, names, source_schema, source_table from {registry} "
            "where feed_id = %s",
            (feed_id,),
        )
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


def source_columns(conn: Any, info: FeedInfo) -> list[tuple[str, str, int]]:
    """``(name, type, column_id)`` of every column of the feed's source table, in order
    (empty if the table does not exist or this user cannot see it)."""
    _, rows = execute(
        conn,
        "select c.name, t.name, c.max_length, c.precision, c.scale, c.column_id "
        "from sys.columns as c join sys.types as t on t.user_type_id = c.user_type_id "
        "where c.object_id = object_id(%s) order by c.column_id",
        (info.source,),
    )
    return [(str(n), _type_text(str(t), p, s), int(i)) for n, t, _, p, s, i in rows]


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


def unread(
    conn: Any, info: FeedInfo, shard: int, after: bytes, upto: bytes
) -> tuple[int, bytes | None]:
    """How many events of ``shard`` lie in ``(after, upto]``, and the first one's ULID."""
    window = "where shard_id = %s and ulid > %s and ulid <= %s"
    feed = _object(info, "feed")
    _, rows = execute(
        conn,
        f"select (select count_big(*) from {feed} {window}), "
        f"(select top (1) ulid from {feed} {window} order by ulid)",
        (shard, after, upto, shard, after, upto),
    )
    count, first = rows[0]
    return int(count), None if first is None else bytes(first)


def outbox_rows(conn: Any, info: FeedInfo, shard: int) -> int | None:
    """Rows of ``shard`` waiting in the outbox; ``None`` when this user may not read the
    outbox (the reader role may not: error 229)."""
    try:
        _, rows = execute(
            conn,
            f"select count_big(*) from {_object(info, 'outbox')} where shard_id = %s",
            (shard,),
        )
    except Exception as exc:
        if error_number(exc) == PERMISSION_DENIED:
            return None
        raise
    return int(rows[0][0])


def oldest_pending_age(conn: Any, info: FeedInfo, shard: int) -> float:
    """Seconds since the shard's oldest pending write started (0.0 when none), by the
    server's clock: ``safe_point``'s ``oldest_pending_started_at`` (a ``sysutcdatetime()``
    of the lock call) against ``sysutcdatetime()``. The reader role may run both, unlike
    a select on the session table."""
    names, rows = execute(conn, f"exec {_object(info, 'safe_point')} @shard_id = %s", (shard,))
    if not rows:
        return 0.0
    started = dict(zip([n.lower() for n in names], rows[0], strict=True)).get(
        "oldest_pending_started_at"
    )
    if started is None:
        return 0.0
    _, now = execute(conn, "select sysutcdatetime()")
    age: float = (now[0][0] - started).total_seconds()
    return round(max(0.0, age), 3)


#: SQL Server's name limit in UTF-16 code units (protocol section 9).
_NAME_LIMIT = 128


def object_name(kind: str, feed_id: str) -> str:
    """The name of the feed's object of ``kind`` as setup gives it: ``kind:feed_id``, or
    when longer than 128 UTF-16 code units ``kind:`` + the longest prefix that fits + ``~``
    + the first 8 hex digits of md5(feed_id) (_feed_object_name in macros/_feed/spec.sql).
    For the objects the registry's ``names`` leave out (``capture_check``).

    >>> object_name("capture_check", "shop.items")
    'capture_check:shop.items'
    >>> name = object_name("capture_check", "s." + "t" * 200)
    >>> len(name), name[-9:]
    (128, '~b098092e')
    """
    full = f"{kind}:{feed_id}"
    if len(full.encode("utf-16-le")) // 2 <= _NAME_LIMIT:
        return full
    suffix = "~" + hashlib.md5(feed_id.encode("utf-8")).hexdigest()[:8]
    budget = _NAME_LIMIT - len(f"{kind}:{suffix}".encode("utf-16-le")) // 2
    prefix = feed_id.encode("utf-16-le")[: budget * 2].decode("utf-16-le", "ignore")
    return f"{kind}:{prefix}{suffix}"


#: capture_check's refusal (docs/sqlserver.md, Error numbers): PostgreSQL's CF011.
CAPTURE_LOST = 51068
_NO_PROCEDURE = 2812


def capture_state(conn: Any, info: FeedInfo) -> tuple[str, bool | None]:
    """The feed's capture (``trigger`` or ``none``, from the registry) and, with ``capture:
    trigger``, whether its source lost its trigger, has it disabled or was re-created: what
    ``capture_check`` (which ``read_feed`` calls at the head) refuses with 51068. ``None``
    where it cannot be asked: a feed set up before capture_check existed (error 2812; run
    ``upgrade_feed``) or a user without EXECUTE on it (229; the reader role has it)."""
    _, rows = execute(
        conn,
        f"select json_value(options, N'$.capture') from {quote_mssql(info.schema)}.[feeds] "
        "where feed_id = %s",
        (info.feed_id,),
    )
    if not rows or rows[0][0] != "trigger":
        return "none", None
    check = f"{quote_mssql(info.schema)}.{quote_mssql(object_name('capture_check', info.feed_id))}"
    try:
        execute(conn, f"exec {check}")
    except Exception as exc:
        number = error_number(exc)
        if number == CAPTURE_LOST:
            return "trigger", True
        if number in (_NO_PROCEDURE, PERMISSION_DENIED):
            return "trigger", None
        raise
    return "trigger", False


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


def move_outbox(
    conn: Any, info: FeedInfo, shard: int, start: bytes, max_rows: int = 10000, max_calls: int = 100
) -> int:
    """Publish the committed outbox rows of ``shard``: ``read_feed`` from ``start`` (the
    shard's safe point) with ``max_rows`` as page size, again from the last event it
    returned, until a call returns nothing (at most ``max_calls`` calls); returns the
    events returned.

    ``read_feed`` moves whole source transactions, at most a page's worth (the first one
    whole), so one call may leave committed rows behind even when its page is not full:
    only an empty page says that everything committed before it is published.
    """
    published = 0
    cursor = start
    for _ in range(max_calls):
        with translating():
            page = read_feed(conn, info, shard, cursor, max_rows)
        if not page:
            break
        published += len(page)
        cursor = page[-1][1]
    return published


def horizons(conn: Any, info: FeedInfo, shard_ids: Sequence[int]) -> dict[int, bytes]:
    """Per shard, the newest event retention removed (protocol 8.1); shards retention never
    touched, and every shard of a feed set up without retention, are left out."""
    if "retention" not in info.names or not shard_ids:
        return {}
    shard_ids = [_checks.shard(s) for s in shard_ids]
    _, rows = call(
        conn,
        f"select shard_id, horizon from {_object(info, 'retention')} "
        f"where shard_id in ({', '.join(['%s'] * len(shard_ids))})",
        tuple(shard_ids),
    )
    return {int(r[0]): bytes(r[1]) for r in rows}


def save_cursor(conn: Any, info: FeedInfo, consumer: str, shard: int, cursor: bytes) -> None:
    """Register ``consumer``'s cursor on ``shard`` (``save_cursor``, protocol 8.1)."""
    call(
        conn,
        f"exec {_object(info, 'save_cursor')} @consumer = %s, @shard_id = %s, @cursor = %s",
        (_checks.consumer(consumer), _checks.shard(shard), _checks.ulid(cursor, "cursor")),
    )


#: The columns of ``snapshot:<feed>`` in table order (:meth:`Snapshot.from_row`).
SNAPSHOT_COLUMNS = (
    "snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at, "
    "finished_at, rows_landed"
)


def snapshots(conn: Any, info: FeedInfo, pending_only: bool = False) -> list[Snapshot]:
    """The feed's snapshot requests (protocol 12.1), oldest first; with ``pending_only``
    those not finished yet. Empty for a feed set up without snapshots (it has none)."""
    if "snapshot" not in info.names:
        return []
    where = " where finished_at is null" if pending_only else ""
    _, rows = call(
        conn,
        f"select {SNAPSHOT_COLUMNS} from {_object(info, 'snapshot')}{where} order by snapshot_id",
    )
    return [Snapshot.from_row(r) for r in rows]


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


def _error_args(exc: BaseException) -> tuple[Any, ...]:
    # pymssql's DB-API errors carry (number, message); its _mssql exceptions carry that
    # pair as their one argument.
    args = exc.args
    if len(args) == 1 and isinstance(args[0], tuple) and args[0] and isinstance(args[0][0], int):
        return tuple(args[0])
    return tuple(args)


def error_number(exc: BaseException) -> int | None:
    """A pymssql error's SQL Server error number, if it carries one.

    >>> error_number(Exception(51012, b"abandoned")), error_number(Exception((208, b"x"),))
    (51012, 208)
    """
    args = _error_args(exc)
    if args and isinstance(args[0], int) and not isinstance(args[0], bool):
        return int(args[0])
    return None


def error_text(exc: BaseException) -> str:
    """A pymssql error's message (its arguments are bytes)."""
    parts = []
    for arg in _error_args(exc):
        parts.append(arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg))
    return " ".join(parts).strip() or type(exc).__name__


def _object(info: FeedInfo, kind: str) -> str:
    return f"{quote_mssql(info.schema)}.{quote_mssql(info.name(kind))}"


def _type_text(name: str, precision: Any, scale: Any) -> str:
    if name.lower() in ("decimal", "numeric"):
        return f"{name}({int(precision)},{int(scale)})"
    return name


def registered_feeds(conn: Any, schema: str = "changefeed") -> Mapping[str, str]:
    """``feed_id -> mode`` of every feed registered under ``schema``; no registry at all
    (no feed was ever set up there) raises :class:`FeedNotFound`."""
    registry = f"{quote_mssql(schema)}.[feeds]"
    with _registry_exists(registry, schema):
        _, rows = call(conn, f"select feed_id, mode from {registry} order by feed_id")
    return {str(r[0]): str(r[1]) for r in rows}


@contextmanager
def _registry_exists(registry: str, schema: str) -> Iterator[None]:
    """Error 208 (invalid object name) on the registry as :class:`FeedNotFound`."""
    try:
        yield
    except Exception as exc:
        if error_number(exc) != _INVALID_OBJECT:
            raise
        raise FeedNotFound(
            f"there is no feed registry {registry}: no feed is set up in this database "
            f"(run changefeed.setup_feed), or the changefeed schema is not {schema!r}"
        ) from None


# -- errors --------------------------------------------------------------------------------

#: The error number of :func:`publish_sql`'s refusal: PostgresFeed's WriteTransactionBroken.
TRANSACTION_BROKEN = WriteTransactionBroken.sqlserver_errors[0]


#: The feed procedures' error numbers (docs/sqlserver.md, "Error numbers") as the exception
#: classes PostgresFeed raises for the same refusal, from each class's ``sqlserver_errors``
#: (:mod:`changefeed.errors`). Numbers not listed (51005, 51021, 51046, 51064: a lock not
#: granted in time; 51011: update_state outside the writer's transaction, which this
#: client never sends) become a plain ChangefeedError.
_BY_NUMBER: dict[int, type[ChangefeedError]] = by_sqlserver_error()

#: ``ulid()`` cannot THROW (it is a function): its refusals come as conversion error 245
#: carrying the text.
_CONVERSION_FAILED = 245


def translate(exc: BaseException) -> BaseException:
    """The :class:`ChangefeedError` for a changefeed procedure's error, else ``exc``.

    >>> class Fake(Exception):
    ...     pass
    >>> type(translate(Fake(51012, b"changefeed: the write was abandoned (stall)"))).__name__
    'WriteAbandoned'
    >>> isinstance(translate(Fake(2627, b"duplicate key")), Fake)
    True
    """
    number = error_number(exc)
    message = _first_line(exc)
    cls: type[ChangefeedError] | None = None
    if number is not None and 51000 <= number < 52000:
        cls = _BY_NUMBER.get(number, ChangefeedError)
    elif number == _CONVERSION_FAILED and "changefeed:" in message:
        cls = UlidRangeError if "ulid offset" in message else NoWriteInProgress
    if cls is None:
        return exc
    return cls(f"{message} (SQL Server error {number})", cause=exc)


def _first_line_source(exc: BaseException) -> str:
    args = _error_args(exc)[1:] if error_number(exc) is not None else exc.args
    return " ".join(a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a) for a in args)


def _first_line(exc: BaseException) -> str:
    # pymssql appends FreeTDS's "DB-Lib error message ..." lines to the server's message.
    text = _first_line_source(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


@contextlib.contextmanager
def translating() -> Iterator[None]:
    """Raise the procedures' errors inside as :class:`ChangefeedError` subclasses."""
    try:
        yield
    except ChangefeedError:
        raise
    except Exception as exc:
        translated = translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def call(conn: Any, sql: str, params: Row | None = None) -> tuple[list[str], list[Row]]:
    """:func:`execute` with the procedures' errors as :class:`ChangefeedError` subclasses."""
    with translating():
        return execute(conn, sql, params)


# -- the client ----------------------------------------------------------------------------

#: Rows per INSERT of :meth:`SqlServerWrite.insert_events` (a VALUES list holds at most 1000).
EVENT_CHUNK = 500


@dataclass(kw_only=True)
class SqlServerWrite(BlockWrite):
    """The write in progress of :meth:`SqlServerFeed.write` (blocking mode).

    ``ulid_sql`` numbers events from the feed's sequence
    (``[ulid:<feed>](next value for [sequence:<feed>])``); in your own statements add
    ``over (order by ...)`` to fix the order within one statement.
    """

    write_id: uuid.UUID
    session_id: int

    def insert_events(
        self,
        keys: Iterable[Sequence[Any]],
        images: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> int:
        """Insert one event per key tuple (in the feed's key column order), in order.

        ``images`` is PostgreSQL's row images (``row_image: true``), which SQL Server feeds
        do not have yet (setup refuses the option): passing them is refused, as PostgreSQL
        refuses them for a feed set up without it.
        """
        if images is not None:
            raise InvalidArgument(
                f"feed {self.info.feed_id} carries no row images (row_image: true is not "
                "supported on SQL Server yet): call insert_events without images"
            )
        rows = self._checked_keys(keys)
        for start in range(0, len(rows), EVENT_CHUNK):
            chunk = rows[start : start + EVENT_CHUNK]
            params = tuple(v for n, key in enumerate(chunk) for v in (n, *key))
            call(self.conn, insert_events_sql(self.info, len(chunk)), (self.shard_id, *params))
        self.events += len(rows)
        return len(rows)


def insert_events_sql(info: FeedInfo, count: int) -> str:
    """``count`` events numbered from the sequence in the order of a VALUES list."""
    keys = [quote_mssql(name) for name in info.key_names]
    aliases = [f"k{i}" for i in range(len(keys))]
    row = "(" + ", ".join(["%s"] * (len(keys) + 1)) + ")"
    numbered = f"next value for {_object(info, 'sequence')} over (order by v.n)"
    return (
        f"insert into {_object(info, 'feed')} (shard_id, ulid, {', '.join(keys)}) "
        f"select %s, {_object(info, 'ulid')}({numbered}), "
        f"{', '.join('v.' + a for a in aliases)} "
        f"from (values {', '.join([row] * count)}) as v (n, {', '.join(aliases)})"
    )


class SqlServerFeed(FeedClient):
    """One feed in one SQL Server database: ``SqlServerFeed("shop.orders")``.

    The API of :class:`~changefeed.client.PostgresFeed` over the T-SQL procedures of
    docs/sqlserver.md. Every method takes a pymssql connection in autocommit mode
    (:func:`connect` gives one): pymssql's default, ``autocommit=False``, keeps a
    transaction open at all times, inside which the lock call, ``read_feed`` on an outbox
    feed and ``tombstone`` refuse to run (they commit work of their own).

    >>> feed = SqlServerFeed("shop.orders")
    >>> feed.feed_id, feed.schema
    ('shop.orders', 'changefeed')
    """

    def _load(self, conn: Any) -> FeedInfo:
        return registry_entry(conn, self.feed_id, self.schema)

    # -- registry and health -------------------------------------------------------------

    def shards(self, conn: Any) -> list[int]:
        return shards(conn, self.info(conn))

    def outbox_rows(self, conn: Any, shard: int) -> int | None:
        info = self._require(conn, "outbox", "outbox_rows")
        return outbox_rows(conn, info, _checks.shard(shard))

    def capture_state(self, conn: Any) -> tuple[str, bool | None]:
        return capture_state(conn, self.info(conn))

    def oldest_pending_age(self, conn: Any, shard: int) -> float | None:
        return oldest_pending_age(conn, self.info(conn), _checks.shard(shard))

    def unread(self, conn: Any, shard: int, after: bytes, upto: bytes) -> tuple[int, bytes | None]:
        shard = _checks.shard(shard)
        after, upto = _checks.ulid(after, "after"), _checks.ulid(upto, "upto")
        return unread(conn, self.info(conn), shard, after, upto)

    # -- blocking mode -------------------------------------------------------------------

    def ulid_sql(self, conn: Any) -> str:
        """The T-SQL expression for the next ULID of the connection's write (blocking mode).

        >>> # SqlServerFeed("shop.orders").ulid_sql(conn)
        >>> # '[changefeed].[ulid:shop.orders](next value for [changefeed].[sequence:shop.orders])'
        """
        info = self._require(conn, "blocking", "ulid_sql")
        return f"{_object(info, 'ulid')}(next value for {_object(info, 'sequence')})"

    @contextmanager
    def write(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
    ) -> Iterator[SqlServerWrite]:
        """Run one transaction that writes events to ``shard`` (blocking mode).

        One batch takes the shard's lock in autocommit (``set implicit_transactions off``
        first, so a session that turned them on cannot keep the lock call's work
        uncommitted) and opens the transaction (``begin transaction``); the body's
        statements run in it. On a normal exit ``exec update_state; commit;`` is sent as
        one batch (one round trip). On an exception, or if that fails, the transaction is
        rolled back, the write released, and the exception re-raised (a refusal of the
        procedures as a :class:`ChangefeedError`; ``retryable`` tells whether to run the
        transaction again).

        The body may open transactions of its own: ``begin transaction`` ... ``commit``
        nests in the write's (SQL Server commits nothing before the outermost commit, the
        publish batch's), and ``save transaction <name>`` / ``rollback transaction
        <name>`` undo part of it; raise an exception to undo all of it. A ``commit`` with
        no ``begin transaction`` of the body's own, or a ``rollback`` without a savepoint
        name, ends the write's transaction, and a ``begin transaction`` left open would
        keep it open after the publish: the publish batch checks that ``@@trancount`` is 1
        first and otherwise raises :class:`WriteTransactionBroken` (51072), after which
        the transaction is rolled back and the write released (what such a ``commit``
        committed stays). pymssql's ``conn.commit()`` and ``conn.rollback()`` do nothing
        on the autocommit connection the write needs.
        """
        info = self._require(conn, "blocking", "write")
        handle = self.lock(
            conn, shard, time_hint, stall_timeout_ms=stall_timeout_ms, lock_probe_ms=lock_probe_ms
        )
        try:
            yield handle
            call(conn, publish_sql(info))
        except BaseException as exc:
            self._abort(conn, info)
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    def lock(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
        begin: bool = True,
    ) -> SqlServerWrite:
        """Take the shard's lock and open a write (step 1), and with ``begin`` the
        transaction too, in one batch. ``write`` does this; call it only when driving the
        procedures by hand, then finish with ``exec update_state; commit;``
        (:func:`publish_sql`) or :meth:`release`. On an error the write is released.
        """
        info = self._require(conn, "blocking", "lock")
        shard = _checks.shard(shard)
        time_hint = _checks.time_hint(time_hint)
        if getattr(conn, "autocommit_state", True) is False:
            raise LockInTransaction(
                f"feed {self.feed_id}: the lock call needs a connection in autocommit mode, "
                "because it commits work of its own before your transaction; connect with "
                "pymssql.connect(..., autocommit=True) or "
                "changefeed.dialects.sqlserver.client.connect, or call conn.autocommit(True) "
                "after committing"
            )
        params = (shard, time_hint, stall_timeout_ms, lock_probe_ms)
        try:
            _, rows = call(conn, lock_sql(info, begin=begin), params)
        except BaseException:
            # The lock call may have committed the write before failing, and an unreleased
            # write makes every later lock on this connection fail with 51006.
            self._abort(conn, info)
            raise
        write_id, ulid_high, block_start, session_id = rows[0]
        return SqlServerWrite(
            conn=conn,
            info=info,
            shard_id=shard,
            write_id=uuid.UUID(str(write_id)),
            session_id=int(session_id),
            ulid_high=bytes(ulid_high),
            block_start=int(block_start),
            ulid_sql=self.ulid_sql(conn),
            feed_table=_object(info, "feed"),
        )

    def release(self, conn: Any) -> bool:
        """Roll back this connection's transaction, abandon its write and release the lock.

        ``write`` does this itself; call it only when driving the procedures by hand.
        Returns whether there was a write to release: whether this connection's session
        context still named a shard lock of the feed, which the procedure clears.
        """
        info = self._require(conn, "blocking", "release")
        _, rows = call(conn, held_write_sql(info))
        call(conn, release_sql(info))
        return bool(rows and rows[0][0])

    def _abort(self, conn: Any, info: FeedInfo) -> None:
        # The original exception is the one to report; a lost session ends the lock anyway.
        with contextlib.suppress(Exception):
            call(conn, release_sql(info))

    # -- outbox mode ---------------------------------------------------------------------

    def outbox_sql(self, conn: Any, with_time_hint: bool = False) -> str:
        """The insert statement for outbox rows, with ``%s`` placeholders.

        Placeholders: shard, [time_hint,] then the key columns in registry order.
        """
        info = self._require(conn, "outbox", "outbox_sql")
        columns = ["shard_id", *(["time_hint"] if with_time_hint else [])]
        columns += [quote_mssql(k) for k in info.key_names]
        placeholders = ", ".join("%s" for _ in columns)
        return (
            f"insert into {_object(info, 'outbox')} ({', '.join(columns)}) values ({placeholders})"
        )

    def insert_outbox(
        self,
        conn: Any,
        shard: int,
        keys: Iterable[Sequence[Any]],
        time_hint: datetime | None = None,
    ) -> int:
        """Record changed keys in the outbox, in the connection's current transaction.

        Does not commit: on an autocommit connection wrap it with your statements in
        ``begin transaction`` ... ``commit``; each statement alone commits by itself, and
        each commit becomes a block of its own. ``time_hint`` defaults to the insert's
        ``sysutcdatetime()``. Call it after the writes it records: the mover orders
        transactions by their last outbox row, and that is the order of one key's writes
        only if each row follows its write (docs/protocol.md, invariant O8).
        """
        query = self.outbox_sql(conn, with_time_hint=time_hint is not None)
        shard = _checks.shard(shard)
        time_hint = _checks.time_hint(time_hint)
        names = self.info(conn).key_names
        prefix: tuple[Any, ...] = (shard, time_hint) if time_hint is not None else (shard,)
        rows = [(*prefix, *key) for key in _checks.keys(keys, len(names), names)]
        head, _, row = query.rpartition(" values ")
        # Multi-row VALUES lists of EVENT_CHUNK rows: one round trip per chunk.
        for start in range(0, len(rows), EVENT_CHUNK):
            chunk = rows[start : start + EVENT_CHUNK]
            sql = f"{head} values {', '.join([row] * len(chunk))}"
            call(conn, sql, tuple(v for r in chunk for v in r))
        return len(rows)

    def move_outbox(self, conn: Any, shard: int, max_rows: int = 10000) -> int:
        """Move committed outbox rows of ``shard`` into the feed; returns the events moved.

        SQL Server has no procedure of its own for this: ``read_feed`` moves when called at
        the head, so this calls it from the shard's safe point with ``max_rows`` as page
        size. Whole source transactions are moved, up to ``max_rows`` events (a larger
        first one whole). The count includes events another mover published meanwhile;
        0 means nothing was left to move.
        """
        info = self._require(conn, "outbox", "move_outbox")
        shard = _checks.shard(shard)
        max_rows = _checks.positive(max_rows, "max_rows")
        start = self.safe_point(conn, shard).safe_point
        return move_outbox(conn, info, shard, start, max_rows, max_calls=1)

    # -- reading -------------------------------------------------------------------------

    def read_page(
        self, conn: Any, shard: int, cursor: bytes = ZERO_ULID, page_size: int = 1000
    ) -> Page:
        """The events of ``shard`` after ``cursor``, up to the safe point, in ULID order.

        At most ``page_size`` events, ending at a transaction boundary (a transaction
        larger than a page comes whole). On an outbox feed, ``read_feed`` moves the outbox
        first when the page is not full (``Page.moved`` stays 0: the procedure does not
        report it). Resume from ``page.cursor``.
        """
        info = self.info(conn)
        cursor = _checks.ulid(cursor, "cursor")
        page_size = _checks.positive(page_size, "page_size")
        with translating():
            rows = read_feed(conn, info, _checks.shard(shard), cursor, page_size)
        events = [Event(int(r[0]), bytes(r[1]), tuple(r[2:])) for r in rows]
        return Page(events=events, cursor=events[-1].ulid if events else cursor)

    def safe_point(self, conn: Any, shard: int) -> SafePoint:
        """The shard's safe point, head and number of pending writes (one snapshot)."""
        info = self.info(conn)
        names, rows = call(
            conn, f"exec {_object(info, 'safe_point')} @shard_id = %s", (_checks.shard(shard),)
        )
        if not rows:
            return SafePoint(ZERO_ULID, ZERO_ULID, 0)
        row = dict(zip(names, rows[0], strict=True))
        return SafePoint(
            bytes(row["safe_point"] or ZERO_ULID), bytes(row["head"] or ZERO_ULID),
            int(row["pending"] or 0),
        )  # fmt: skip

    def tombstone(self, conn: Any, shard: int, session_id: int, write_id: WriteId) -> bool:
        """Abandon a stale pending write (``session_id`` and ``write_id`` as ``safe_point``
        reports its oldest one: on SQL Server a uuid, or its text); returns whether this
        call won over its commit."""
        info = self.info(conn)
        _, rows = call(
            conn,
            f"exec {_object(info, 'tombstone')} @shard_id = %s, @session_id = %s, @write_id = %s",
            (_checks.shard(shard), int(session_id), _checks.write_id(write_id)),
        )
        return bool(rows[0][0])

    # -- read barrier --------------------------------------------------------------------

    def barrier_acquire(self, conn: Any, shard: int) -> Barrier:
        """A barrier covering every transaction committed before this call."""
        info = self.info(conn)
        shard = _checks.shard(shard)
        _, rows = call(conn, f"exec {_object(info, 'barrier_acquire')} @shard_id = %s", (shard,))
        position, sequence = rows[0]
        return Barrier(
            shard, bytes(position or ZERO_ULID), None if sequence is None else int(sequence)
        )

    def barrier_check(self, conn: Any, barrier: Barrier) -> bool:
        """Whether a read up to the safe point now includes everything the barrier covers."""
        info = self.info(conn)
        _, rows = call(
            conn,
            f"exec {_object(info, 'barrier_check')} @shard_id = %s, @position = %s, "
            "@outbox_sequence = %s",
            (barrier.shard_id, _checks.ulid(barrier.position, "barrier.position"),
             barrier.outbox_sequence),
        )  # fmt: skip
        return bool(rows[0][0])

    # -- retention (protocol 8.1) -------------------------------------------------------

    def _save_cursor(
        self, conn: Any, info: FeedInfo, consumer: str, shard: int, cursor: bytes
    ) -> None:
        save_cursor(conn, info, consumer, shard, cursor)

    def _forget_consumer(self, conn: Any, info: FeedInfo, consumer: str) -> int:
        _, rows = call(conn, f"exec {_object(info, 'forget_consumer')} @consumer = %s", (consumer,))
        return int(rows[0][0])

    def _consumer_rows(self, conn: Any, info: FeedInfo) -> Sequence[Sequence[Any]]:
        _, rows = call(
            conn,
            f"select consumer, shard_id, [cursor] from {_object(info, 'consumer')} "
            "order by consumer, shard_id",
        )
        return rows

    def _horizons(self, conn: Any, info: FeedInfo, shards: Sequence[int]) -> dict[int, bytes]:
        return horizons(conn, info, shards)

    # -- snapshots (protocol 12): the checks in FeedClient ------------------------------

    def _outside_transaction(self, conn: Any, why: str) -> None:
        if getattr(conn, "autocommit_state", True) is False:
            raise LockInTransaction(
                f"feed {self.feed_id}: {why}, in a transaction of its own, and needs a "
                "connection in autocommit mode (changefeed.dialects.sqlserver.client.connect, or "
                "conn.autocommit(True) after committing)"
            )

    def _snapshot_begin(
        self, conn: Any, info: FeedInfo, shard: int, key_from: str | None, key_to: str | None
    ) -> int:
        _, rows = call(
            conn,
            f"exec {_object(info, 'snapshot_begin')} @shard_id = %s, @key_from = %s, @key_to = %s",
            (shard, key_from, key_to),
        )
        return int(rows[0][0])

    def _snapshot_finish(self, conn: Any, info: FeedInfo, snapshot_id: int, rows: int) -> bool:
        _, found = call(
            conn,
            f"exec {_object(info, 'snapshot_finish')} @snapshot_id = %s, @rows_landed = %s",
            (snapshot_id, rows),
        )
        return bool(found[0][0])

    def _snapshot_rows(
        self,
        conn: Any,
        info: FeedInfo,
        *,
        snapshot_id: int | None = None,
        pending_only: bool = False,
    ) -> list[Snapshot]:
        if snapshot_id is None:
            return snapshots(conn, info, pending_only)
        _, rows = call(
            conn,
            f"select {SNAPSHOT_COLUMNS} from {_object(info, 'snapshot')} where snapshot_id = %s",
            (snapshot_id,),
        )
        return [Snapshot.from_row(r) for r in rows]

    def _retain_rows(
        self,
        conn: Any,
        info: FeedInfo,
        max_age_ms: int | None,
        keep_last: int | None,
        override_consumers: bool,
        shard: int | None,
    ) -> Sequence[Sequence[Any]]:
        """``retain`` (docs/sqlserver.md, Retention): 51062 is :class:`FellBehindRetention`."""
        _, rows = call(
            conn,
            f"exec {_object(info, 'retain')} @max_age_ms = %s, @keep_last = %s, "
            "@override_consumers = %s, @shard_id = %s",
            (max_age_ms, keep_last, override_consumers, shard),
        )
        return rows


def lock_sql(info: FeedInfo, begin: bool = True) -> str:
    """The lock call (and ``begin transaction``) in one batch; returns the block and
    ``@@spid``. Parameters: shard, time hint, stall timeout, lock probe (``None`` for the
    defaults)."""
    return (
        "set nocount on;\n"
        "set implicit_transactions off;\n"
        "declare @w uniqueidentifier, @h binary(8), @l bigint;\n"
        f"exec {_object(info, 'lock')} @shard_id = %s, @time_hint = %s, "
        "@stall_timeout_ms = %s, @lock_probe_ms = %s, "
        "@write_id = @w output, @ulid_high = @h output, @ulid_low = @l output;\n"
        + ("begin transaction;\n" if begin else "")
        + "select @w as write_id, @h as ulid_high, @l as ulid_low, @@spid as session_id;"
    )


def publish_sql(info: FeedInfo) -> str:
    """``update_state`` and ``commit``: one batch, one round trip (protocol 4.4).

    First it checks that the write's transaction is still open at nesting level 1: a
    ``commit`` at level 0 would find nothing to commit (what the writer's own COMMIT
    committed is out of reach), one at level 2 would commit nothing and leave the
    transaction, with the published write, open until the session ends. Either refuses
    with :data:`TRANSACTION_BROKEN`, before ``update_state``.
    """
    return (
        "if @@trancount <> 1\n"
        "begin\n"
        "    declare @cf_message nvarchar(2048) = concat(N'changefeed: the write''s "
        "transaction is at nesting level ', @@trancount, N', not 1: its body ended it (a "
        "COMMIT or ROLLBACK of its own; what such a COMMIT committed stays) or left a BEGIN "
        "TRANSACTION of its own open; update_state did not run: roll back and release');\n"
        f"    throw {TRANSACTION_BROKEN}, @cf_message, 1;\n"
        "end;\n"
        f"exec {_object(info, 'update_state')};\ncommit;"
    )


def context_key(info: FeedInfo, slot: str) -> str:
    """The ``session_context`` key under which the feed's procedures keep ``slot`` of this
    connection's write (``w`` its id, ``s`` its shard, ``n`` its lock's name), as
    macros/sqlserver/context.sql names it: ``changefeed/<md5 of schema/feed_id>/<slot>``.

    >>> context_key(FeedInfo("shop.orders", "changefeed", "blocking", (), {}), "n")
    'changefeed/ff8f5c0c322d3c39f41e32d54227ff09/n'
    """
    digest = hashlib.md5(f"{info.schema}/{info.feed_id}".encode()).hexdigest()
    return f"changefeed/{digest}/{slot}"


def held_write_sql(info: FeedInfo) -> str:
    """Whether this connection holds a write of the feed: 1 or 0, read before a release."""
    # The key is hex digits and slashes: nothing in it needs escaping.
    key = context_key(info, "n")
    return f"select case when session_context(N'{key}') is null then 0 else 1 end;"


def release_sql(info: FeedInfo) -> str:
    """Roll back and release, one batch (protocol section 4: the rollback first)."""
    return f"if @@trancount > 0 rollback;\nexec {_object(info, 'release')};"


#: ``sp_getapplock`` without waiting, owned by the session: released by
#: ``sp_releaseapplock`` or when the session ends (also when its process is killed).
#: It needs membership in the database principal ``public`` only, so the reader role
#: takes it. Parameter: the resource (at most 255 characters).
WRITER_LOCK_SQL = (
    "set nocount on;\n"
    "declare @r int;\n"
    "exec @r = sys.sp_getapplock @Resource = %s, @LockMode = 'Exclusive', "
    "@LockOwner = 'Session', @LockTimeout = 0, @DbPrincipal = 'public';\n"
    "select @r as result;"
)


def writer_lock_name(table: str) -> str:
    """The applock resource of ``table``'s landing: the shared name, or its sha256 where
    that is longer than the 255 characters ``sp_getapplock`` takes.

    >>> writer_lock_name("landing.orders")
    'changefeed/land/landing.orders'
    >>> len(writer_lock_name("d." + "t" * 300))
    80
    """
    name = writer_lock_resource(table)
    if len(name) <= 255:
        return name
    return "changefeed/land/" + hashlib.sha256(name.encode()).hexdigest()


def try_writer_lock(conn: Any, table: str) -> str | None:
    """Take the writer lock of the landed table ``table`` for this session, without
    waiting; ``None`` when taken, else who holds it (one line)."""
    _, rows = call(conn, WRITER_LOCK_SQL, (writer_lock_name(table),))
    result = int(rows[0][0])
    if result >= 0:
        return None
    if result == -1:
        # sys.dm_tran_locks would name the session, but needs VIEW SERVER STATE.
        return "another session of this database"
    raise ChangefeedError(f"sp_getapplock for the landing of {table} failed with {result}")


def source_identity(conn: Any) -> str:
    """``sqlserver:<server name>/<database>``."""
    _, rows = call(conn, "select cast(serverproperty('ServerName') as nvarchar(256)), db_name()")
    return f"sqlserver:{rows[0][0]}/{rows[0][1]}"
