"""Helpers for the live SQL Server suite: the DSN, connections (pymssql, which bundles
FreeTDS), a fresh test database, T-SQL quoting, and ``LiveFeed``, a thin client that
speaks the protocol of docs/protocol.md to one feed set up from its rendered batch.

DSN: ``CHANGEFEED_SQLSERVER_DSN=mssql://user:password@host:1433/database``
(user, password and database percent-encoded if needed; the port defaults to 1433;
``?tds_version=7.4`` and ``?encryption=require`` pass through to pymssql). The user must
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
from dataclasses import dataclass
from typing import Any

from tests import sqlserver_matrix as matrix

DSN_VARIABLE = "CHANGEFEED_SQLSERVER_DSN"
BLOCK = 2**36


class DsnError(ValueError):
    """The DSN is malformed."""


@dataclass(frozen=True)
class Dsn:
    host: str
    port: int
    user: str
    password: str
    database: str
    options: Mapping[str, str]

    @classmethod
    def parse(cls, dsn: str) -> Dsn:
        """``mssql://user:password@host:port/database?tds_version=7.4``.

        >>> Dsn.parse("mssql://sa:p%40ss@db:1433/master").password
        'p@ss'
        """
        parts = urllib.parse.urlsplit(dsn)
        if parts.scheme not in ("mssql", "sqlserver"):
            raise DsnError(f"{DSN_VARIABLE} must start with mssql://, got {parts.scheme}://")
        if not parts.hostname or not parts.username:
            raise DsnError(f"{DSN_VARIABLE} needs a user and a host: mssql://user:pass@host/db")
        options = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
        unknown = set(options) - {"tds_version", "encryption"}
        if unknown:
            raise DsnError(f"{DSN_VARIABLE}: unknown options {sorted(unknown)}")
        return cls(
            host=parts.hostname,
            port=parts.port or 1433,
            user=urllib.parse.unquote(parts.username),
            password=urllib.parse.unquote(parts.password or ""),
            database=urllib.parse.unquote(parts.path.lstrip("/")) or "master",
            options=options,
        )


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
    """Connections to the test database of one run."""

    def __init__(self, dsn: Dsn, database: str) -> None:
        self.dsn = dsn
        self.database = database

    def connect(self, *, database: str | None = None, timeout: int = 120) -> Any:
        import pymssql

        kwargs: dict[str, Any] = {
            "server": self.dsn.host,
            "port": str(self.dsn.port),
            "user": self.dsn.user,
            "password": self.dsn.password,
            "database": database or self.database,
            "autocommit": True,
            "timeout": timeout,
            "login_timeout": 30,
            "appname": "changefeed-live-tests",
        }
        if "tds_version" in self.dsn.options:
            kwargs["tds_version"] = self.dsn.options["tds_version"]
        if "encryption" in self.dsn.options:
            kwargs["encryption"] = self.dsn.options["encryption"]
        return pymssql.connect(**kwargs)

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


@dataclass
class Write:
    """One blocking-mode write, as the lock call returned it."""

    write_id: uuid.UUID
    ulid_high: bytes
    ulid_low: int
    session_id: int


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

    # -- blocking writers -------------------------------------------------------------------

    def lock(
        self,
        conn: Any,
        shard: int,
        time_hint: dt.datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
    ) -> Write:
        rows = run(
            conn,
            "set nocount on;\n"
            "declare @w uniqueidentifier, @h binary(8), @l bigint;\n"
            f"exec {self.obj('lock')} @shard_id = {shard}, @time_hint = {lit(time_hint)},\n"
            f"    @stall_timeout_ms = {lit(stall_timeout_ms)},\n"
            f"    @lock_probe_ms = {lit(lock_probe_ms)},\n"
            "    @write_id = @w output, @ulid_high = @h output, @ulid_low = @l output;\n"
            "select @w, @h, @l, @@spid;",
        )
        write_id, high, low_, spid = rows[0]
        return Write(uuid.UUID(str(write_id)), bytes(high), int(low_), int(spid))

    def insert_events_sql(self, shard: int, rows: Sequence[Sequence[Any]]) -> str:
        """An INSERT of events into the feed table, numbered from the sequence in order."""
        values = ",\n    ".join(
            "(" + ", ".join([str(i)] + [lit(v) for v in row]) + ")" for i, row in enumerate(rows)
        )
        aliases = ", ".join(["n"] + [f"k{i}" for i in range(len(self.key_names))])
        numbered = f"next value for {self.obj('sequence')} over (order by v.n)"
        keys = ", ".join(f"v.k{i}" for i in range(len(self.key_names)))
        return (
            f"insert into {self.obj('feed')} (shard_id, ulid, {self.keys_sql})\n"
            f"select {shard}, {self.obj('ulid')}({numbered}), {keys}\n"
            f"from (values\n    {values}) as v ({aliases});"
        )

    def publish_sql(self) -> str:
        """update_state and commit: ONE batch, one round trip (protocol 4.4)."""
        return f"exec {self.obj('update_state')};\ncommit;"

    def write(
        self,
        conn: Any,
        shard: int,
        rows: Sequence[Sequence[Any]],
        time_hint: dt.datetime | None = None,
    ) -> Write:
        """A whole blocking write: lock, the transaction with its events, publish."""
        write = self.lock(conn, shard, time_hint)
        try:
            run(conn, "begin transaction;\n" + self.insert_events_sql(shard, rows))
            run(conn, self.publish_sql())
        except Exception:
            self.abort(conn)
            raise
        return write

    def abort(self, conn: Any) -> None:
        """After an error: roll back, then release (protocol section 4)."""
        run(conn, f"if @@trancount > 0 rollback;\nexec {self.obj('release')};")

    # -- outbox writers ---------------------------------------------------------------------

    def outbox_insert(
        self,
        conn: Any,
        shard: int,
        rows: Sequence[Sequence[Any]],
        time_hint: dt.datetime | None = None,
    ) -> None:
        """One source transaction inserting ``rows`` (key tuples) into the outbox."""
        hint = lit(time_hint) if time_hint is not None else "sysutcdatetime()"
        values = ",\n    ".join(
            "(" + ", ".join([str(shard), hint] + [lit(v) for v in row]) + ")" for row in rows
        )
        run(
            conn,
            "begin transaction;\n"
            f"insert into {self.obj('outbox')} (shard_id, time_hint, {self.keys_sql}) values\n"
            f"    {values};\ncommit;",
        )

    # -- readers ----------------------------------------------------------------------------

    def read_feed(
        self, conn: Any, shard: int, cursor: bytes = bytes(16), page_size: int = 1000
    ) -> list[tuple[Any, ...]]:
        """One page: [(ulid, *keys)], in ULID order."""
        rows = run(
            conn,
            f"exec {self.obj('read_feed')} @shard_id = {shard}, @cursor = {lit(cursor)}, "
            f"@page_size = {page_size};",
        )
        return [(bytes(r[0]), *r[1:]) for r in rows]

    def read_all(
        self, conn: Any, shard: int, cursor: bytes = bytes(16), page_size: int = 1000
    ) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        while True:
            page = self.read_feed(conn, shard, cursor, page_size)
            if not page:
                return out
            out += page
            cursor = page[-1][0]

    def safe_point(self, conn: Any, shard: int) -> dict[str, Any]:
        cursor = conn.cursor(as_dict=True)
        try:
            cursor.execute(f"exec {self.obj('safe_point')} @shard_id = {shard};")
            rows = cursor.fetchall()
        finally:
            cursor.close()
        if not rows:
            return {"shard_id": shard, "safe_point": bytes(16), "head": bytes(16), "pending": 0}
        row = dict(rows[0])
        for column in ("safe_point", "head"):
            row[column] = bytes(row[column])
        return row

    def tombstone(self, conn: Any, shard: int, session_id: int, write_id: uuid.UUID) -> bool:
        won = scalar(
            conn,
            f"exec {self.obj('tombstone')} @shard_id = {shard}, @session_id = {session_id}, "
            f"@write_id = {lit(write_id)};",
        )
        return bool(won)

    def barrier_acquire(self, conn: Any, shard: int) -> tuple[bytes, int | None]:
        rows = run(conn, f"exec {self.obj('barrier_acquire')} @shard_id = {shard};")
        position, sequence = rows[0]
        return bytes(position), (int(sequence) if sequence is not None else None)

    def barrier_check(self, conn: Any, shard: int, barrier: tuple[bytes, int | None]) -> bool:
        position, sequence = barrier
        released = scalar(
            conn,
            f"exec {self.obj('barrier_check')} @shard_id = {shard}, @position = {lit(position)}, "
            f"@outbox_sequence = {lit(sequence)};",
        )
        return bool(released)

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
