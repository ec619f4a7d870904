"""Write to and read from a PostgreSQL change feed (psycopg 3).

A feed is set up by the dbt macros (``changefeed.setup_feed`` or the model post-hook);
this module calls its procedures. Object names come from the registry
``<schema>.feeds``, read once per :class:`PostgresFeed` and cached.

Blocking mode: :meth:`PostgresFeed.write` takes the shard's lock outside any transaction,
yields a :class:`Write` whose :attr:`Write.ulid_sql` numbers the events, and publishes
and commits in one round trip (``select update_state(); commit``)::

    feed = PostgresFeed("shop.orders")
    with feed.write(conn, shard=0) as w:
        conn.execute("insert into shop.orders (order_id, note) values (%s, %s)", (42, "new"))
        w.insert_events([(42,)])                      # or SQL with w.ulid_sql
    # committed here; on an exception: rolled back and the lock released

Outbox mode: writers insert keys into the outbox inside their own transaction
(:meth:`PostgresFeed.insert_outbox`); readers move the outbox into the feed
(:meth:`PostgresFeed.move_outbox`; :meth:`PostgresFeed.read_page` does it when at the
head).

Reading (either mode)::

    cursor = ZERO_ULID
    while True:
        page = feed.read_page(conn, shard=0, cursor=cursor, page_size=1000)
        if not page.events:
            break
        process(page.events)
        cursor = page.cursor                        # store with the output, atomically

Connections: the lock is a session-level advisory lock and the write in progress is
kept in a session setting, so a write must use one connection from ``write`` to its end
(no transaction-mode pooler between). Methods other than ``write`` run in the
connection's open transaction if there is one, else in their own short transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from changefeed.client import checks as _checks
from changefeed.client.core import (
    ZERO_ULID,
    FeedInfo,
    KeyColumn,
    jsonb_text,
    quote_pg,
    quote_pg_literal,
    redact,
    writer_lock_key,
)
from changefeed.client.errors import (
    CannotConnect,
    DriverMissing,
    FeedNotFound,
    InvalidArgument,
    LockInTransaction,
    WriteTransactionBroken,
    translate,
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

__all__ = [
    "CONNECT_TIMEOUT",
    "PostgresFeed",
    "Write",
    "connect",
    "load",
    "registered_feeds",
    "run",
    "source_identity",
    "try_writer_lock",
]


#: Seconds a connection attempt waits for the server, unless the URI sets connect_timeout.
CONNECT_TIMEOUT = 15


def connect(uri: str, *, application_name: str = "changefeed", password: str | None = None) -> Any:
    """An autocommit psycopg connection to ``uri`` (a libpq URI or ``key=value`` string;
    ``password``, if given, replaces the URI's).

    Raises :class:`~changefeed.client.CannotConnect` naming the server (password
    redacted) and the first line of the cause, :class:`~changefeed.errors.DriverMissing`
    without psycopg.
    """
    try:
        import psycopg
    except ImportError:
        raise DriverMissing(
            "psycopg is not installed; install the PostgreSQL extra: "
            "pip install 'changefeed[postgres]'"
        ) from None
    extra: dict[str, Any] = {} if "connect_timeout" in uri else {"connect_timeout": CONNECT_TIMEOUT}
    if password:
        extra["password"] = password
    try:
        return psycopg.connect(uri, autocommit=True, application_name=application_name, **extra)
    except psycopg.Error as exc:
        text = str(exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
        raise CannotConnect(f"cannot connect to PostgreSQL at {redact(uri)}: {reason}") from None


def run(conn: Any, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Execute ``query`` in the connection's transaction or, if none is open, in its own.

    On an autocommit connection or inside an open transaction the statement just runs.
    On an idle non-autocommit connection it runs in a transaction that is committed
    here, so the connection is left idle as it was found. CF SQLSTATEs become
    :class:`~changefeed.client.ChangefeedError` subclasses.
    """
    import psycopg

    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    try:
        if not conn.autocommit and idle:
            with conn.transaction():
                cur = conn.execute(query, params)
                return list(cur.fetchall()) if cur.description else []
        cur = conn.execute(query, params)
        return list(cur.fetchall()) if cur.description else []
    except psycopg.Error as exc:
        translated = translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def _json_dumps(value: Any) -> str:
    """JSON of a row image, spelt as the capture's ``to_jsonb`` spells the same row, so
    that both writer paths store the same image and every value the column holds
    (infinities, NaN, bytes, time zones, arrays, composites) reads back
    (``jsonb_populate_record``)."""
    return jsonb_text(value)


def load(conn: Any, feed_id: str, schema: str) -> FeedInfo:
    """Read one feed's registry row."""
    import psycopg

    registry = f"{quote_pg(schema)}.feeds"
    try:
        # The image columns are probed, not inferred from the option: switched off, they
        # stay with the images written while it was on (protocol 5.2).
        rows = run(
            conn,
            f"select r.mode, r.keys, r.names, r.protocol_version, r.options, exists ("
            "select 1 from pg_catalog.pg_attribute as a where a.attrelid = "
            "pg_catalog.to_regclass(pg_catalog.quote_ident(%s) || '.' || "
            "pg_catalog.quote_ident(r.names ->> 'feed')) "
            "and a.attname = 'row_deleted' and not a.attisdropped) "
            f"from {registry} as r where r.feed_id = %s",
            (schema, feed_id),
        )
    except psycopg.errors.UndefinedTable:
        raise FeedNotFound(
            f"there is no feed registry {registry}: no feed is set up in this database under the "
            f"changefeed schema {schema!r} (run `dbt run-operation changefeed.setup_feed`)"
        ) from None
    if not rows:
        known = [r[0] for r in run(conn, f"select feed_id from {registry} order by 1")]
        raise FeedNotFound(
            f"feed {feed_id!r} is not registered in {registry}; registered feeds: "
            f"{', '.join(known) or 'none'}"
        )
    mode, keys, names, version, options, images = rows[0]
    return FeedInfo(
        feed_id=feed_id,
        schema=schema,
        mode=str(mode),
        keys=tuple(
            KeyColumn(str(k["name"]), str(k["data_type"]), k.get("collation") or None) for k in keys
        ),
        names={str(k): str(v) for k, v in dict(names).items()},
        protocol_version=int(version),
        row_image=bool(dict(options or {}).get("row_image", False)),
        images=bool(images),
    )


@dataclass(kw_only=True)
class Write(BlockWrite):
    """The write in progress of :meth:`PostgresFeed.write` (blocking mode).

    ``ulid_sql`` is an SQL expression giving the next ULID of this write each time it is
    evaluated (``ulid:<feed>(nextval(<sequence>))``); use it in your own inserts into
    ``feed_table``::

        conn.execute(
            f"insert into {w.feed_table} (shard_id, ulid, order_id) "
            f"select %s, {w.ulid_sql}, order_id from new_orders order by order_id",
            (w.shard_id,),
        )
    """

    write_id: int

    def insert_events(
        self,
        keys: Iterable[Sequence[Any]],
        images: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> int:
        """Insert one event per key tuple (in the feed's key column order), in order.

        ``images`` (a feed with ``row_image: true``): one per key, the source row as this
        transaction left it, as a mapping of column name to value (stored as jsonb), or
        ``None`` when the transaction deleted the row. Without ``images`` the events carry
        none, and readers join back to the source for them.

        >>> # with feed.write(conn, 0) as w: w.insert_events([(1,), (2,)])  -> 2
        >>> # w.insert_events([(1,), (2,)], images=[{"order_id": 1, "note": "a"}, None])
        """
        checked = self._checked_keys(keys)
        columns = ", ".join(quote_pg(k) for k in self.info.key_names)
        placeholders = ", ".join("%s" for _ in self.info.key_names)
        extra = ""
        rows: list[tuple[Any, ...]] = [(self.shard_id, *key) for key in checked]
        if images is not None:
            rows = [
                (*row, *image)
                for row, image in zip(rows, self._images(images, len(rows)), strict=True)
            ]
            columns += ", row_image, row_deleted"
            extra = ", %s, %s"
        query = (
            f"insert into {self.feed_table} (shard_id, ulid, {columns}) "
            f"values (%s, {self.ulid_sql}, {placeholders}{extra})"
        )
        if not rows:
            return 0
        with self.conn.cursor() as cur:
            try:
                if len(rows) == 1:
                    cur.execute(query, rows[0])
                else:
                    cur.executemany(query, rows)
            except Exception as exc:
                translated = translate(exc)
                if translated is exc:
                    raise
                raise translated from exc
        self.events += len(rows)
        return len(rows)

    def _images(
        self, images: Iterable[Mapping[str, Any] | None], count: int
    ) -> list[tuple[Any, bool]]:
        """``(row_image, row_deleted)`` per event: the row as jsonb, or a delete marker."""
        from psycopg.types.json import Jsonb

        if not self.info.row_image:
            raise InvalidArgument(
                f"feed {self.info.feed_id} was set up without row_image: true, so its events "
                "carry no row image; set it up with row_image: true (setup_feed applies it in "
                "place) or call insert_events without images"
            )
        pairs: list[tuple[Any, bool]] = []
        for image in images:
            if image is not None and not isinstance(image, Mapping):
                raise InvalidArgument(
                    "each image must be a mapping of column name to value (the row after "
                    f"the write) or None (the row was deleted), not {image!r}"
                )
            pairs.append(
                (None, True) if image is None else (Jsonb(dict(image), _json_dumps), False)
            )
        if len(pairs) != count:
            raise InvalidArgument(
                f"insert_events got {count} key(s) and {len(pairs)} image(s); "
                "pass one image per key"
            )
        return pairs


class PostgresFeed(FeedClient):
    """One feed in one PostgreSQL database: ``PostgresFeed("shop.orders")``.

    ``feed_id`` is the unquoted ``schema.table`` of the source table; ``schema`` the
    changefeed schema (the dbt var ``changefeed_schema``, default ``changefeed``).
    The instance holds no connection; every method takes one (psycopg 3).

    >>> feed = PostgresFeed("shop.orders")
    >>> feed.feed_id, feed.schema
    ('shop.orders', 'changefeed')
    """

    def _load(self, conn: Any) -> FeedInfo:
        return load(conn, self.feed_id, self.schema)

    # -- health ---------------------------------------------------------------------------

    def shards(self, conn: Any) -> list[int]:
        info = self.info(conn)
        if "shards" in info.names:
            rows = run(conn, f"select s.shard_id from {info.q('shards')}() as s")
            return [int(r[0]) for r in rows]
        # A feed set up before the shards function: its tables (the owner may read them).
        sql = f"select shard_id from {info.q('state')}"
        if info.mode == "outbox":
            sql += f" union select shard_id from {info.q('outbox')}"
        rows = run(conn, f"select distinct shard_id from ({sql}) as s order by 1")
        return [int(r[0]) for r in rows]

    def outbox_rows(self, conn: Any, shard: int) -> int | None:
        import psycopg

        info = self._require(conn, "outbox", "outbox_rows")
        sql = f"select count(*) from {info.q('outbox')} where shard_id = %s"
        try:
            return int(run(conn, sql, (_checks.shard(shard),))[0][0])
        except psycopg.errors.InsufficientPrivilege:
            return None

    def capture_state(self, conn: Any) -> tuple[str, bool | None]:
        # The test move_outbox raises CF011 for: the source table exists and fewer than
        # its four capture triggers are there and enabled.
        info = self.info(conn)
        kinds = ("capture_insert", "capture_update", "capture_delete", "capture_truncate")
        rows = run(
            conn,
            f"""select f.options ->> 'capture',
                       (select count(*) from pg_catalog.pg_trigger as t
                         where t.tgrelid = s.oid and t.tgenabled <> 'D'
                           and t.tgname = any (%s::text[])),
                       s.oid is not null
                  from {quote_pg(self.schema)}.feeds as f
                  left join lateral (select pg_catalog.to_regclass(
                      pg_catalog.quote_ident(f.source_schema) || '.'
                      || pg_catalog.quote_ident(f.source_table)) as oid) as s on true
                 where f.feed_id = %s""",
            ([info.names.get(k, "") for k in kinds], self.feed_id),
        )
        if not rows or rows[0][0] != "trigger":
            return "none", None
        return "trigger", bool(rows[0][2]) and int(rows[0][1]) < len(kinds)

    def oldest_pending_age(self, conn: Any, shard: int) -> float | None:
        import psycopg

        info = self.info(conn)
        try:
            rows = run(
                conn,
                "select coalesce(extract(epoch from pg_catalog.clock_timestamp() "
                f"- pg_catalog.min(se.started_at)), 0) from {info.q('session')} as se "
                "where se.shard_id = %s and se.state = 0",
                (_checks.shard(shard),),
            )
        except psycopg.errors.InsufficientPrivilege:
            return None
        return round(max(0.0, float(rows[0][0])), 3)

    def unread(self, conn: Any, shard: int, after: bytes, upto: bytes) -> tuple[int, bytes | None]:
        info = self.info(conn)
        shard = _checks.shard(shard)
        after, upto = _checks.ulid(after, "after"), _checks.ulid(upto, "upto")
        window = "where shard_id = %s and ulid > %s and ulid <= %s"
        rows = run(
            conn,
            f"select (select count(*) from {info.q('feed')} {window}), "
            f"(select ulid from {info.q('feed')} {window} order by ulid limit 1)",
            (shard, after, upto, shard, after, upto),
        )
        return int(rows[0][0]), None if rows[0][1] is None else bytes(rows[0][1])

    # -- blocking mode -------------------------------------------------------------------

    def ulid_sql(self, conn: Any) -> str:
        """The SQL expression for the next ULID of the connection's write (blocking mode).

        >>> # PostgresFeed("shop.orders").ulid_sql(conn)
        >>> # 'changefeed."ulid:shop.orders"(pg_catalog.nextval(E\\'...\\'::pg_catalog.regclass))'
        """
        info = self._require(conn, "blocking", "ulid_sql")
        sequence = quote_pg_literal(info.q("sequence"))
        return f"{info.q('ulid')}(pg_catalog.nextval({sequence}::pg_catalog.regclass))"

    @contextmanager
    def write(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
    ) -> Iterator[Write]:
        """Run one transaction that writes events to ``shard`` (blocking mode).

        Takes the shard's lock outside any transaction (the connection must be idle), then
        opens the write's transaction (psycopg's ``conn.transaction()``) and yields a
        :class:`Write`: everything the body runs is in that transaction. On a normal exit,
        ``select update_state(); commit`` is sent as one query (one round trip: the session
        row that update_state locks, which tells the next lock holder that this write is
        committing, is never held across a round trip).
        On an exception, or if that fails, the transaction is rolled back, the lock
        released, and the exception re-raised (a ``CF`` one as a
        :class:`ChangefeedError`; ``retryable`` tells whether to run it again);
        ``psycopg.Rollback`` rolls back and releases without an error.

        The body may open transactions of its own with ``conn.transaction()``: each is a
        savepoint in the write's transaction, so its rows commit with their events or not
        at all. ``conn.commit()``, ``conn.rollback()`` and setting ``conn.autocommit`` in
        the body raise ``psycopg.ProgrammingError`` before anything is sent (the write is
        rolled back). A ``COMMIT`` or ``ROLLBACK`` sent as SQL cannot be stopped: never
        send one; a body that leaves the transaction ended raises
        :class:`WriteTransactionBroken` instead of publishing.

        The connection's autocommit setting is restored afterwards. ``stall_timeout_ms``
        and ``lock_probe_ms`` are SQL Server's per-call settings; PostgreSQL takes them
        per feed (``setup_feed``), so a value here is refused.
        """
        import psycopg

        shard = _checks.shard(shard)
        time_hint = _checks.time_hint(time_hint)
        _per_feed_only(stall_timeout_ms, lock_probe_ms)
        info = self._require(conn, "blocking", "write")
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise LockInTransaction(
                f"feed {self.feed_id}: write() needs an idle connection, because the lock call "
                "must run outside a transaction block; commit or roll back first"
            )
        previous_autocommit = conn.autocommit
        conn.autocommit = True
        published = False
        try:
            # Everything from the lock call on is covered: the lock call may fail after it
            # committed the write (e.g. its routine was replaced mid-call), and without a
            # release the connection keeps the shard lock and every later write() fails CF006.
            try:
                handle = self._lock(conn, info, shard, time_hint)
                conn.autocommit = False
                # The write's transaction is open (BEGIN sent) before the body runs, and
                # psycopg knows it owns it: a body's conn.transaction() becomes a savepoint,
                # its conn.commit()/rollback() are refused, so no row of the body commits
                # without update_state (protocol 4.4).
                with conn.transaction():
                    yield handle
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                        raise WriteTransactionBroken(
                            f"feed {self.feed_id} shard {shard}: the body of write() ended the "
                            "write's transaction itself (a COMMIT or ROLLBACK sent as SQL), "
                            "so the write is released, not published, and what that COMMIT "
                            "committed stays; open a savepoint with conn.transaction() in "
                            "the body instead"
                        )
                    # No parameters: psycopg sends this as one simple query, one round trip.
                    # The begin gives psycopg's own closing COMMIT an empty transaction to
                    # end (without it the server would log a warning for every write): one
                    # round trip after the write committed, the price of the guard above.
                    conn.execute(f"select {info.q('update_state')}(); commit; begin", prepare=False)
                    published = True
                if not published:  # the body raised psycopg.Rollback: psycopg rolled back
                    self._abort(conn, info)
            except BaseException as exc:
                if published:
                    # The write committed; only psycopg's closing no-op failed (the
                    # connection was lost just after): reporting it would get it retried.
                    if isinstance(exc, psycopg.Error):
                        return
                    raise
                self._abort(conn, info)
                translated = translate(exc)
                if translated is exc:
                    raise
                raise translated from exc
        finally:
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                conn.autocommit = previous_autocommit

    def lock(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
        begin: bool = True,
    ) -> Write:
        """Take the shard's lock and open a write (step 1); with ``begin`` the connection
        leaves autocommit mode, so the write's transaction opens with the next statement.
        ``write`` does this; call it only when driving the routines by hand, then finish
        with ``select update_state(); commit`` in one query (protocol 4.4) or, after a
        rollback, :meth:`release`. On an error the write is released. The connection must
        be in autocommit mode (the lock call runs outside a transaction block);
        ``stall_timeout_ms`` and ``lock_probe_ms`` are refused as in :meth:`write`.
        """
        info = self._require(conn, "blocking", "lock")
        shard = _checks.shard(shard)
        time_hint = _checks.time_hint(time_hint)
        _per_feed_only(stall_timeout_ms, lock_probe_ms)
        if not conn.autocommit:
            raise LockInTransaction(
                f"feed {self.feed_id}: the lock call needs a connection in autocommit mode, "
                "because it must run outside a transaction block; connect with "
                "psycopg.connect(..., autocommit=True), or commit and set conn.autocommit = True"
            )
        try:
            handle = self._lock(conn, info, shard, time_hint)
        except BaseException:
            self._abort(conn, info)
            raise
        if begin:
            conn.autocommit = False
        return handle

    def _lock(self, conn: Any, info: FeedInfo, shard: int, time_hint: datetime | None) -> Write:
        rows = run(conn, f"call {info.q('lock')}(%s, %s)", (shard, time_hint))
        write_id, ulid_high, block_start = rows[0]
        return Write(
            conn=conn,
            info=info,
            shard_id=shard,
            write_id=int(write_id),
            ulid_high=bytes(ulid_high),
            block_start=int(block_start),
            ulid_sql=self.ulid_sql(conn),
            feed_table=info.q("feed"),
        )

    def release(self, conn: Any) -> bool:
        """Abandon this connection's write (after a rollback) and release its lock.

        ``write`` does this itself; call it only when driving the SQL by hand.
        Returns whether there was a write to release.
        """
        info = self._require(conn, "blocking", "release")
        return bool(run(conn, f"select {info.q('release')}()")[0][0])

    def _abort(self, conn: Any, info: FeedInfo) -> None:
        import psycopg

        if conn.closed or conn.broken:
            return  # the server ends the session, which releases the lock
        try:
            conn.rollback()
            conn.autocommit = True
            run(conn, f"select {info.q('release')}()")
        except psycopg.Error:
            pass  # the original exception is the one to report

    # -- outbox mode ---------------------------------------------------------------------

    def outbox_sql(self, conn: Any, with_time_hint: bool = False) -> str:
        """The insert statement for outbox rows, with ``%s`` placeholders.

        Placeholders: shard, [time_hint,] then the key columns in registry order.
        """
        info = self._require(conn, "outbox", "outbox_sql")
        columns = ["shard_id", *(["time_hint"] if with_time_hint else [])]
        columns += [quote_pg(k) for k in info.key_names]
        placeholders = ", ".join("%s" for _ in columns)
        return f"insert into {info.q('outbox')} ({', '.join(columns)}) values ({placeholders})"

    def insert_outbox(
        self,
        conn: Any,
        shard: int,
        keys: Iterable[Sequence[Any]],
        time_hint: datetime | None = None,
    ) -> int:
        """Record changed keys in the outbox, in the connection's current transaction.

        Does not commit: the outbox rows commit (or roll back) with your transaction.
        ``time_hint`` defaults to the transaction's start time. Call it after the writes
        it records, as below: the mover orders transactions by their last outbox row, and
        that is the order of one key's writes only if each row follows its write
        (docs/protocol.md, invariant O8).

        >>> # with conn.transaction():
        >>> #     conn.execute("update shop.items set ... where sku = %s", ("a",))
        >>> #     feed.insert_outbox(conn, shard=0, keys=[("a",)])
        """
        shard = _checks.shard(shard)
        time_hint = _checks.time_hint(time_hint)
        query = self.outbox_sql(conn, with_time_hint=time_hint is not None)
        names = self.info(conn).key_names
        prefix: tuple[Any, ...] = (shard, time_hint) if time_hint is not None else (shard,)
        rows = [(*prefix, *key) for key in _checks.keys(keys, len(names), names)]
        if not rows:
            return 0
        with conn.cursor() as cur:
            if len(rows) == 1:
                cur.execute(query, rows[0])
            else:
                cur.executemany(query, rows)
        return len(rows)

    def move_outbox(self, conn: Any, shard: int, max_rows: int = 10000) -> int:
        """Move committed outbox rows of ``shard`` into the feed; returns how many moved.

        Whole source transactions are moved, in order, until ``max_rows`` is reached (a
        larger transaction is moved whole). Returns 0 if another mover held the shard's
        mover lock for longer than the stall timeout.
        """
        shard = _checks.shard(shard)
        max_rows = _checks.positive(max_rows, "max_rows")
        info = self._require(conn, "outbox", "move_outbox")
        rows = run(conn, f"call {info.q('move_outbox')}(%s, %s)", (shard, max_rows))
        return int(rows[0][0] or 0)

    # -- reading -------------------------------------------------------------------------

    def read_page(
        self, conn: Any, shard: int, cursor: bytes = ZERO_ULID, page_size: int = 1000
    ) -> Page:
        """The events of ``shard`` after ``cursor``, up to the safe point, in ULID order.

        At most ``page_size`` events, ending at a transaction boundary (a transaction
        larger than a page comes whole). In outbox mode, when the page is not full (the
        reader is at the head), the outbox is moved and the page read again.
        Resume from ``page.cursor``.
        """
        shard = _checks.shard(shard)
        cursor = _checks.ulid(cursor, "cursor")
        page_size = _checks.positive(page_size, "page_size")
        info = self.info(conn)
        events = self._read(conn, info, shard, cursor, page_size)
        moved = 0
        if info.mode == "outbox" and len(events) < page_size:
            moved = self.move_outbox(conn, shard, max_rows=max(page_size, 1000))
            # Read again even if this call moved nothing: its move may have waited for a
            # concurrent mover's lock, and that mover's events are in the feed now.
            events = self._read(conn, info, shard, cursor, page_size)
        return Page(events=events, cursor=events[-1].ulid if events else cursor, moved=moved)

    def _read(
        self, conn: Any, info: FeedInfo, shard: int, cursor: bytes, page_size: int
    ) -> list[Event]:
        keys = ", ".join(f"f.{quote_pg(k)}" for k in info.key_names)
        if info.images:
            keys += ", f.row_image, f.row_deleted"
        rows = run(
            conn,
            f"select f.shard_id, f.ulid, {keys} from {info.q('read_feed')}(%s, %s, %s) as f",
            (shard, cursor, page_size),
        )
        if info.images:
            return [Event(int(r[0]), bytes(r[1]), tuple(r[2:-2]), r[-2], r[-1]) for r in rows]
        return [Event(int(r[0]), bytes(r[1]), tuple(r[2:])) for r in rows]

    def safe_point(self, conn: Any, shard: int) -> SafePoint:
        """The shard's safe point, head and number of pending writes (one snapshot)."""
        shard = _checks.shard(shard)
        info = self.info(conn)
        row = run(
            conn,
            f"select safe_point, head, pending from {info.q('safe_point')}(%s)",
            (shard,),
        )[0]
        return SafePoint(bytes(row[0]), bytes(row[1]), int(row[2]))

    def tombstone(self, conn: Any, shard: int, session_id: int, write_id: WriteId) -> bool:
        """Abandon a stale pending write (``session_id`` and ``write_id`` as ``safe_point``
        reports its oldest one: on PostgreSQL an int); returns whether this call won over
        its commit."""
        shard = _checks.shard(shard)
        session_id = _checks.integer(session_id, "session_id", -(2**31), 2**31)
        write_id = _checks.integer(write_id, "write_id")
        info = self.info(conn)
        rows = run(conn, f"select {info.q('tombstone')}(%s, %s, %s)", (shard, session_id, write_id))
        return bool(rows[0][0])

    # -- read barrier --------------------------------------------------------------------

    def barrier_acquire(self, conn: Any, shard: int) -> Barrier:
        """A barrier covering every transaction committed before this call."""
        shard = _checks.shard(shard)
        info = self.info(conn)
        row = run(
            conn,
            f'select "position", outbox_sequence from {info.q("barrier_acquire")}(%s)',
            (shard,),
        )[0]
        return Barrier(shard, bytes(row[0]), None if row[1] is None else int(row[1]))

    def barrier_check(self, conn: Any, barrier: Barrier) -> bool:
        """Whether a read up to the safe point now includes everything the barrier covers."""
        if not isinstance(barrier, Barrier):
            raise InvalidArgument(
                f"barrier must be a Barrier (from barrier_acquire), not {barrier!r}"
            )
        _checks.shard(barrier.shard_id)
        _checks.ulid(barrier.position, "barrier.position")
        info = self.info(conn)
        if info.mode == "outbox":
            _checks.integer(barrier.outbox_sequence, "barrier.outbox_sequence (outbox mode)")
        rows = run(
            conn,
            f"select {info.q('barrier_check')}(%s, %s, %s)",
            (barrier.shard_id, barrier.position, barrier.outbox_sequence),
        )
        return bool(rows[0][0])

    # -- retention (protocol 8.1) -------------------------------------------------------

    def _save_cursor(
        self, conn: Any, info: FeedInfo, consumer: str, shard: int, cursor: bytes
    ) -> None:
        run(conn, f"select {info.q('save_cursor')}(%s, %s, %s)", (consumer, shard, cursor))

    def _forget_consumer(self, conn: Any, info: FeedInfo, consumer: str) -> int:
        return int(run(conn, f"select {info.q('forget_consumer')}(%s)", (consumer,))[0][0])

    def _consumer_rows(self, conn: Any, info: FeedInfo) -> Sequence[Sequence[Any]]:
        return run(
            conn,
            f'select k.consumer, k.shard_id, k."cursor" from {info.q("consumer")} as k '
            "order by k.consumer, k.shard_id",
        )

    def _horizons(self, conn: Any, info: FeedInfo, shards: Sequence[int]) -> dict[int, bytes]:
        rows = run(
            conn,
            f"select rt.shard_id, rt.horizon from {info.q('retention')} as rt "
            "where rt.shard_id = any(%s)",
            (list(shards),),
        )
        return {int(r[0]): bytes(r[1]) for r in rows}

    def _retain_rows(
        self,
        conn: Any,
        info: FeedInfo,
        max_age_ms: int | None,
        keep_last: int | None,
        override_consumers: bool,
        shard: int | None,
    ) -> Sequence[Sequence[Any]]:
        return run(
            conn,
            "select r.shard_id, r.removed, r.horizon, r.held_for_consumers, r.slowest_consumer "
            f"from {info.q('retain')}(%s, %s, %s, %s) as r",
            (max_age_ms, keep_last, override_consumers, shard),
        )

    # -- snapshots (protocol 12): the checks in FeedClient ------------------------------

    def _outside_transaction(self, conn: Any, why: str) -> None:
        import psycopg

        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise LockInTransaction(
                f"feed {self.feed_id}: {why} and needs a connection outside a transaction "
                "block; commit or roll back first"
            )

    def _snapshot_begin(
        self, conn: Any, info: FeedInfo, shard: int, key_from: str | None, key_to: str | None
    ) -> int:
        rows = run(
            conn,
            f"select s.snapshot_id from {info.q('snapshot_begin')}(%s, %s, %s) as s",
            (shard, key_from, key_to),
        )
        return int(rows[0][0])

    def _snapshot_finish(self, conn: Any, info: FeedInfo, snapshot_id: int, rows: int) -> bool:
        sql = f"select {info.q('snapshot_finish')}(%s, %s)"
        return bool(run(conn, sql, (snapshot_id, rows))[0][0])

    def _snapshot_rows(
        self,
        conn: Any,
        info: FeedInfo,
        *,
        snapshot_id: int | None = None,
        pending_only: bool = False,
    ) -> list[Snapshot]:
        where, params = "", [] if snapshot_id is None else [snapshot_id]
        if snapshot_id is not None:
            where = " where sn.snapshot_id = %s"
        elif pending_only:
            where = " where sn.finished_at is null"
        rows = run(
            conn,
            "select sn.snapshot_id, sn.shard_id, sn.first_ulid, sn.last_ulid, sn.key_from, "
            "sn.key_to, sn.requested_at at time zone 'UTC', sn.finished_at at time zone 'UTC', "
            f"sn.rows_landed from {info.q('snapshot')} as sn{where} order by sn.snapshot_id",
            params,
        )
        return [Snapshot.from_row(r) for r in rows]


def _per_feed_only(stall_timeout_ms: int | None, lock_probe_ms: int | None) -> None:
    """PostgreSQL's lock routine takes the feed's stall settings, never a call's."""
    settings = (("stall_timeout_ms", stall_timeout_ms), ("lock_probe_ms", lock_probe_ms))
    given = [f"{name}={value}" for name, value in settings if value is not None]
    if given:
        raise InvalidArgument(
            f"{', '.join(given)}: PostgreSQL feeds take the stall settings per feed, not per "
            "call; set them with dbt run-operation changefeed.setup_feed --args "
            "'{relation: ..., stall_timeout_ms: ..., lock_probe_ms: ...}' (applied in place)"
        )


def registered_feeds(conn: Any, schema: str = "changefeed") -> Mapping[str, str]:
    """``feed_id -> mode`` of every feed registered under ``schema``; no registry at all
    (no feed was ever set up there) raises :class:`FeedNotFound`."""
    import psycopg

    registry = f"{quote_pg(schema)}.feeds"
    try:
        rows = run(conn, f"select feed_id, mode from {registry} order by 1")
    except psycopg.errors.UndefinedTable:
        raise FeedNotFound(
            f"there is no feed registry {registry}: no feed is set up in this database under the "
            f"changefeed schema {schema!r} (run `dbt run-operation changefeed.setup_feed`)"
        ) from None
    return {str(r[0]): str(r[1]) for r in rows}


#: Who holds a landing's writer lock: the sessions of ``pg_locks`` (readable by every
#: role) with what ``pg_stat_activity`` shows this role of them.
_WRITER_LOCK_HOLDER = (
    "select l.pid, a.application_name, pg_catalog.host(a.client_addr), "
    "pg_catalog.to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SSOF') "
    "from pg_catalog.pg_locks as l "
    "left join pg_catalog.pg_stat_activity as a on a.pid = l.pid "
    "where l.locktype = 'advisory' and l.granted and l.objsubid = 2 "
    "and l.classid::bigint = %s and l.objid::bigint = %s "
    "and l.database = (select d.oid from pg_catalog.pg_database as d "
    "where d.datname = pg_catalog.current_database())"
)


#: How long a held writer lock is tried again before its holder is named (a session that
#: has just closed its connection releases it moments later).
_CLOSING_HOLDER_WAIT = 2.0


def try_writer_lock(conn: Any, table: str) -> str | None:
    """Take the writer lock of the landed table ``table`` for this session, without
    waiting for a live holder; ``None`` when taken, else who holds it (one line). A held
    lock is tried again for 2 s first, so that a session which has just closed its
    connection (and releases it moments later) does not count as a holder.

    A session-level advisory lock: it lasts until the session ends, also when its process
    is killed (PostgreSQL ends the session when the connection drops), so ``conn`` must
    stay open while the landing writes (no transaction-mode pooler between). Advisory locks
    need no grant: the reader role takes it.
    """
    classid, objid = writer_lock_key(table)
    # A session that has just closed its connection holds its locks until its server
    # process has exited, moments later (and is listed in pg_locks until then): a landing
    # started right after another one ended (a loop, a re-run) would be refused. So the
    # lock is tried for a short grace period before its holder is named.
    deadline = time.monotonic() + _CLOSING_HOLDER_WAIT
    while True:
        taken = run(conn, "select pg_catalog.pg_try_advisory_lock(%s::int4, %s::int4)",
                    (classid, objid))[0][0]  # fmt: skip
        if taken:
            return None
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # pg_locks shows the two halves as unsigned oids.
    rows = run(conn, _WRITER_LOCK_HOLDER, (classid & 0xFFFFFFFF, objid & 0xFFFFFFFF))
    if not rows:
        return "another session (it has just ended: try again)"
    pid, application, client, since = rows[0]
    seen = {"application": application, "client": client, "connected": since}
    details = ", ".join(f"{label} {value}" for label, value in seen.items() if value)
    return f"session pid {pid}" + (f" ({details})" if details else "")


def source_identity(conn: Any) -> str:
    """``postgresql:<system identifier>/<database>``: the database, wherever it is
    reached from (the identifier is the cluster's, fixed at initdb; replicas share it)."""
    rows = run(conn, "select (select s.system_identifier from pg_catalog.pg_control_system() "
               "as s)::text, pg_catalog.current_database()")  # fmt: skip
    return f"postgresql:{rows[0][0]}/{rows[0][1]}"
