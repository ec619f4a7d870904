"""Helpers for the live SQL Server suite: the DSN, connections (pymssql, which bundles
FreeTDS), a fresh test database, T-SQL quoting, and ``LiveFeed``: one feed of the render
matrix set up from its rendered batch, with its admin inspection. The protocol calls are
the client's own: ``LiveFeed.client`` is a ``changefeed.client.SqlServerFeed`` and the
tests get its result types (``SqlServerWrite``, ``Page``/``Event``, ``SafePoint``,
``Barrier``); nothing here speaks the protocol by itself.

DSN: ``CHANGEFEED_SQLSERVER_DSN=mssql://user:password@host:1433/database``, read by the
client's own parser (``changefeed.dialects.sqlserver.client.connect_arguments``: user, password
and database percent-encoded if needed; ``?tds_version=7.4``, ``?encryption=require`` and
the other parameters it knows pass through to pymssql). The user must
be allowed to CREATE DATABASE: every run creates its own database
``changefeed_live_<random>`` (snapshot isolation and READ_COMMITTED_SNAPSHOT on, the
worst case for the lock protocol) and drops it at the end.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tests.support import sqlserver_matrix as matrix

from changefeed.client import CannotConnect, Event, FeedInfo, SqlServerFeed
from changefeed.dialects.sqlserver import client as sqlserver
from changefeed.dialects.sqlserver.client import SqlServerWrite

DSN_VARIABLE = "CHANGEFEED_SQLSERVER_DSN"
BLOCK = 2**36


class DsnError(ValueError):
    """The DSN is malformed."""


def connect_arguments(dsn: str, database: str | None = None) -> dict[str, Any]:
    """``pymssql.connect`` arguments of the DSN, by the client's parser, for ``database``
    (default: the DSN's, else master).

    >>> args = connect_arguments("mssql://sa:p%40ss@db:1433/?tds_version=7.4", "live")
    >>> args["password"], args["database"], args["tds_version"], args["autocommit"]
    ('p@ss', 'live', '7.4', True)
    """
    parts = urllib.parse.urlsplit(dsn)
    if parts.scheme not in ("mssql", "sqlserver"):
        raise DsnError(f"{DSN_VARIABLE} must start with mssql://, got {parts.scheme}://")
    try:
        args = sqlserver.connect_arguments(dsn, application_name="changefeed-live-tests")
    except CannotConnect as exc:
        raise DsnError(f"{DSN_VARIABLE}: {exc}") from None
    if not args["user"] or not parts.hostname:
        raise DsnError(f"{DSN_VARIABLE} needs a user and a host: mssql://user:pass@host/db")
    args["database"] = database or args["database"] or "master"
    args.setdefault("timeout", 120)
    args["login_timeout"] = 30
    return args


def q(name: str) -> str:
    """A bracket-quoted T-SQL identifier (`]` doubled), like the generators' macro."""
    return "[" + name.replace("]", "]]") + "]"


def lit(value: Any) -> str:
    """A T-SQL literal for a Python value (strings as N'...' with quotes doubled)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, dt.datetime):
        return "'" + value.isoformat(timespec="milliseconds") + "'"
    if isinstance(value, dt.date):
        return "'" + value.isoformat() + "'"
    if isinstance(value, uuid.UUID):
        return "'" + str(value) + "'"
    return "N'" + str(value).replace("'", "''") + "'"


class Server:
    """Connections to one database of the DSN's server."""

    def __init__(self, dsn: str, database: str | None = None) -> None:
        self.dsn = dsn
        self.database = connect_arguments(dsn, database)["database"]

    @property
    def uri(self) -> str:
        """The DSN with this database in its path (for the Spark source's option).

        >>> Server("mssql://sa:p%40ss@db:1433/master?tds_version=7.4", "live 1").uri
        'mssql://sa:p%40ss@db:1433/live%201?tds_version=7.4'
        """
        parts = urllib.parse.urlsplit(self.dsn)
        return parts._replace(path="/" + urllib.parse.quote(self.database, safe="")).geturl()

    def connect(self, *, database: str | None = None, timeout: int = 120) -> Any:
        import pymssql

        args = connect_arguments(self.dsn, database or self.database)
        args["timeout"] = timeout
        return pymssql.connect(**args)

    @contextlib.contextmanager
    def connection(self, **kwargs: Any) -> Iterator[Any]:
        conn = self.connect(**kwargs)
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()


def run(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    """Execute one batch; return the rows of its last result set (empty if none)."""
    cursor = conn.cursor()
    try:
        cursor.execute(sql)
        rows: list[tuple[Any, ...]] = []
        while True:
            if cursor.description is not None:
                rows = [tuple(r) for r in cursor.fetchall()]
            if not cursor.nextset():
                break
        return rows
    finally:
        cursor.close()


def scalar(conn: Any, sql: str) -> Any:
    rows = run(conn, sql)
    return rows[0][0] if rows else None


def error_of(exc: BaseException) -> tuple[int | None, str]:
    """(SQL Server error number, message) of a pymssql error."""
    args: tuple[Any, ...] = getattr(exc, "args", ())
    number = args[0] if args and isinstance(args[0], int) else None
    raw = args[1] if len(args) > 1 else str(exc)
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return number, message


@contextlib.contextmanager
def acting_as(mssql: Server, user: str) -> Iterator[Any]:
    """A connection acting (EXECUTE AS USER) as the database user ``user``."""
    with mssql.connection() as c:
        run(c, f"execute as user = {lit(user)};")
        try:
            yield c
        finally:
            run(c, "if @@trancount > 0 rollback;")
            run(c, "revert;")


def member_of(mssql: Server, admin: Any, role: str, user: str) -> Any:
    """:func:`acting_as` ``user``, a user without login that the ``admin`` connection
    creates if missing and adds to the quoted ``role``."""
    missing = f"if database_principal_id({lit(user)}) is null"
    run(admin, f"{missing} create user {q(user)} without login;")
    run(admin, f"alter role {role} add member {q(user)};")
    return acting_as(mssql, user)


def expect_error(conn: Any, sql: str, *, number: int | None = None, text: str = "") -> str:
    """Run ``sql``, which must fail with error ``number`` and a message containing ``text``."""
    import pymssql

    try:
        run(conn, sql)
    except pymssql.Error as exc:
        got_number, message = error_of(exc)
        assert number is None or got_number == number, (got_number, message)
        assert text in message, message
        return message
    raise AssertionError(f"expected an error{f' {number}' if number else ''}: {sql[:300]}")


def low(ulid: bytes) -> int:
    """The signed int64 in bytes 8-15 (ulid_low)."""
    return int.from_bytes(ulid[8:16], "big", signed=True)


def ms(ulid: bytes) -> int:
    """The 48-bit millisecond time in bytes 0-5."""
    return int.from_bytes(ulid[0:6], "big")


def epoch_ms(moment: dt.datetime) -> int:
    return (moment - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1)


def block_of(ulid: bytes) -> tuple[bytes, int]:
    """(ulid_high, ulid_low >> 36): the block, i.e. the source transaction, of a ULID."""
    return ulid[:8], low(ulid) >> 36


# -- source tables ------------------------------------------------------------------------


def source_table_sql(spec: Mapping[str, Any]) -> str:
    """(Re)create the spec's source table: its key columns (a primary key where the types
    allow one) and a payload column."""
    schema, table = spec["source_schema"], spec["source_table"]
    columns = []
    for key in spec["keys"]:
        collation = f" collate {key['collation']}" if key.get("collation") else ""
        null = " null" if key.get("nullable") else " not null"
        columns.append(f"{q(key['name'])} {key['data_type']}{collation}{null}")
    keyable = all("(max)" not in k["data_type"] and not k.get("nullable") for k in spec["keys"])
    pk = ", primary key (" + ", ".join(q(k["name"]) for k in spec["keys"]) + ")" if keyable else ""
    name = f"{q(schema)}.{q(table)}"
    create_schema = lit("create schema " + q(schema))
    return (
        f"if schema_id({lit(schema)}) is null exec sp_executesql {create_schema};\n"
        f"if object_id({lit(name)}) is not null drop table {name};\n"
        f"create table {name} ({', '.join(columns)}, payload nvarchar(100) null{pk});"
    )


# -- one feed ------------------------------------------------------------------------------


#: The render matrix ({case: {section: sql}}), rendered once per session by the
#: ``rendered_matrix`` fixture of conftest.py: the same SQL the render tests check.
RENDERED: dict[str, dict[str, Any]] = {}


class LiveFeed:
    """One feed of the render matrix, set up on the live server from its rendered batches.
    Every method takes the connection to use (each thread its own)."""

    def __init__(self, case: str) -> None:
        if case not in RENDERED:
            raise LookupError(
                f"the render matrix has no case {case!r} yet: LiveFeed needs the session "
                "fixture rendered_matrix (tests/sqlserver_live/conftest.py)"
            )
        self.case = case
        self.spec = matrix.CASES[case]
        self.batches = RENDERED[case]
        self.names = matrix.registered_names(self.batches["setup"])
        self.schema = q(self.spec["schema"])
        self.key_names = [k["name"] for k in self.spec["keys"]]
        self.keys_sql = ", ".join(q(k) for k in self.key_names)
        #: The client under test: every protocol call below goes through it.
        self.client = SqlServerFeed(self.spec["feed_id"], self.spec["schema"])

    def obj(self, kind: str) -> str:
        """The quoted two-part name of one of the feed's objects, e.g. obj('lock')."""
        return self.schema + "." + q(self.names[kind])

    def role(self, kind: str) -> str:
        return q(self.names[kind])

    # -- setup ----------------------------------------------------------------------------

    def setup(self, conn: Any) -> str:
        return str(scalar(conn, self.batches["setup"]))

    def upgrade(self, conn: Any) -> str:
        return str(scalar(conn, self.batches["upgrade"]))

    def teardown(self, conn: Any) -> str:
        return str(scalar(conn, self.batches["teardown"]))

    def create_source(self, conn: Any) -> None:
        run(conn, source_table_sql(self.spec))

    # -- the protocol, through changefeed.client.SqlServerFeed ------------------------------

    @property
    def info(self) -> FeedInfo:
        """The registry entry as setup writes it (for statements built without a call)."""
        return FeedInfo(self.spec["feed_id"], self.spec["schema"], self.spec["mode"], (),
                        self.names, dialect="sqlserver")  # fmt: skip

    def lock(
        self,
        conn: Any,
        shard: int,
        time_hint: dt.datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
    ) -> SqlServerWrite:
        """Step 1 alone, without ``begin transaction`` (the tests then drive the
        transaction by hand, with insert_events_sql and publish_sql)."""
        return self.client.lock(
            conn, shard, time_hint, stall_timeout_ms=stall_timeout_ms,
            lock_probe_ms=lock_probe_ms, begin=False,
        )  # fmt: skip

    def insert_events_sql(self, shard: int, rows: Sequence[Sequence[Any]]) -> str:
        """The client's insert of events (``SqlServerWrite.insert_events``), its values
        written in as literals, for batches the tests compose by hand."""
        params = [shard, *(v for n, row in enumerate(rows) for v in (n, *row))]
        parts = sqlserver.insert_events_sql(self.info, len(rows)).split("%s")
        assert len(parts) == len(params) + 1, "a %s outside the placeholders"
        return "".join(p + lit(v) for p, v in zip(parts, params, strict=False)) + parts[-1] + ";"

    def publish_sql(self) -> str:
        """update_state and commit: ONE batch, one round trip (protocol 4.4)."""
        return sqlserver.publish_sql(self.info)

    def write(
        self,
        conn: Any,
        shard: int,
        rows: Sequence[Sequence[Any]],
        time_hint: dt.datetime | None = None,
    ) -> SqlServerWrite:
        """A whole blocking write through ``SqlServerFeed.write``."""
        with self.client.write(conn, shard, time_hint) as w:
            w.insert_events(rows)
        return w

    def outbox_insert(
        self,
        conn: Any,
        shard: int,
        rows: Sequence[Sequence[Any]],
        time_hint: dt.datetime | None = None,
    ) -> None:
        """One source transaction inserting ``rows`` (key tuples) into the outbox, through
        ``SqlServerFeed.insert_outbox`` (which leaves the transaction to its caller)."""
        run(conn, "begin transaction;")
        try:
            self.client.insert_outbox(conn, shard, rows, time_hint)
            run(conn, "commit;")
        except BaseException:
            run(conn, "if @@trancount > 0 rollback;")
            raise

    def read_all(
        self, conn: Any, shard: int, cursor: bytes = bytes(16), page_size: int = 1000
    ) -> list[Event]:
        """Every event after ``cursor``, page by page through ``SqlServerFeed.read_page``."""
        out: list[Event] = []
        while True:
            page = self.client.read_page(conn, shard, cursor, page_size)
            if not page.events:
                return out
            out += page.events
            cursor = page.cursor

    # -- inspection (as the admin) -------------------------------------------------------------

    def count(self, conn: Any, kind: str, where: str = "") -> int:
        return int(scalar(conn, f"select count(*) from {self.obj(kind)} {where};"))

    def state(self, conn: Any, shard: int) -> dict[str, Any] | None:
        cursor = conn.cursor(as_dict=True)
        try:
            cursor.execute(
                f"select time, ulid_high, ulid_low, generation, head from {self.obj('state')} "
                f"where shard_id = {shard};"
            )
            rows = cursor.fetchall()
        finally:
            cursor.close()
        return dict(rows[0]) if rows else None

    def incidents(self, conn: Any, shard: int) -> list[dict[str, Any]]:
        cursor = conn.cursor(as_dict=True)
        try:
            cursor.execute(
                f"select * from {self.obj('incident')} where shard_id = {shard} "
                "order by generation;"
            )
            return [dict(r) for r in cursor.fetchall()]
        finally:
            cursor.close()


class Threads:
    """Run callables in threads; re-raise the first failure."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()

    def start(self, target: Any, *args: Any) -> None:
        def body() -> None:
            try:
                target(*args)
            except BaseException as exc:
                with self.lock:
                    self.errors.append(exc)

        thread = threading.Thread(target=body, daemon=True)
        self.threads.append(thread)
        thread.start()

    def join(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t for t in self.threads if t.is_alive()]
        if self.errors:
            raise self.errors[0]
        assert not alive, f"{len(alive)} threads still running after {timeout} s"
