"""What the fault scenarios do to a feed, written once for threads and child processes.

A :class:`FeedKit` is a JSON-serialisable description of one feed (its registry row:
object names, mode, key columns, source table), so a child process can rebuild it.
Writes and reads go through the project's client, ``changefeed.dialects.postgres.client``
(``PostgresFeed``); the kit only adds the hooks where a scenario freezes or kills a
client (``step``), bulk inserts, and direct reads of the feed's tables for the checker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg import sql
from tests.support.faults.checker import Event, Key

from changefeed.dialects.postgres.client import PostgresFeed

ZERO = bytes(16)


def _no_step(name: str, **data: Any) -> None:
    return None


@dataclass
class FeedKit:
    feed_id: str
    mode: str
    schema: str
    names: dict[str, str]
    key_columns: list[str]
    source_schema: str
    source_table: str
    options: dict[str, Any] = field(default_factory=dict)

    # -- construction -----------------------------------------------------------------

    @classmethod
    def load(
        cls, conn: psycopg.Connection[Any], feed_id: str, schema: str = "changefeed"
    ) -> FeedKit:
        row = conn.execute(
            sql.SQL(
                "select mode, names, keys, source_schema, source_table, options"
                " from {}.feeds where feed_id = %s"
            ).format(sql.Identifier(schema)),
            [feed_id],
        ).fetchone()
        if row is None:
            raise LookupError(f"feed {feed_id} is not registered in {schema}.feeds")
        mode, names, keys, source_schema, source_table, options = row
        return cls(
            feed_id=feed_id,
            mode=mode,
            schema=schema,
            names=dict(names),
            key_columns=[k["name"] for k in keys],
            source_schema=source_schema,
            source_table=source_table,
            options=dict(options),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeedKit:
        return cls(**data)

    def __str__(self) -> str:
        return json.dumps({"feed": self.feed_id, "mode": self.mode})

    @property
    def client(self) -> PostgresFeed:
        """The project's client for this feed (registry read once per kit)."""
        cached: PostgresFeed | None = self.__dict__.get("_client")
        if cached is None:
            cached = PostgresFeed(self.feed_id, self.schema)
            self.__dict__["_client"] = cached
        return cached

    # -- names ------------------------------------------------------------------------

    def q(self, kind: str) -> sql.Composed:
        return sql.SQL(".").join([sql.Identifier(self.schema), sql.Identifier(self.names[kind])])

    def sequence_literal(self) -> sql.Literal:
        return sql.Literal(
            f"{sql.Identifier(self.schema).as_string(None)}."
            f"{sql.Identifier(self.names['sequence']).as_string(None)}"
        )

    @property
    def key_idents(self) -> sql.Composed:
        return sql.SQL(", ").join(sql.Identifier(c) for c in self.key_columns)

    def key_of(self, row: Sequence[Any]) -> Key:
        return row[0] if len(row) == 1 else tuple(row)

    # -- writing ----------------------------------------------------------------------

    def write(
        self,
        conn: psycopg.Connection[Any],
        shard: int,
        keys: Sequence[Key],
        *,
        time_hint_ms: int | None = None,
        step: Callable[..., None] = _no_step,
        source: bool = True,
        commit_delay_s: float | None = None,
    ) -> None:
        """One source transaction writing ``keys`` (source rows + feed/outbox rows).

        ``step(name)`` is called after the lock (blocking mode), after the inserts, and
        just before the commit is sent; it may block (a held transaction) or raise.
        Raises whatever the server raised; the transaction is rolled back (and, in
        blocking mode, the write released) before it propagates.

        ``commit_delay_s`` (blocking mode) sends ``update_state()`` and ``COMMIT`` as two
        round trips with that pause between them, so that the next writer of the shard
        commits while this one is still committing: the order of commits then differs
        from the order of blocks. ``step("split", ...)`` reports the times.
        """
        hint = (
            None
            if time_hint_ms is None
            else datetime.fromtimestamp(time_hint_ms / 1000, tz=timezone.utc)
        )
        rows = [self._key_tuple(k) for k in keys]
        if self.mode == "blocking" and commit_delay_s is not None:
            self._write_blocking_split(conn, shard, rows, hint, step, commit_delay_s)
        elif self.mode == "blocking":
            self._write_blocking(conn, shard, rows, hint, step, source)
        else:
            self._write_outbox(conn, shard, rows, hint, step, source)

    def _key_tuple(self, key: Key) -> tuple[Any, ...]:
        if len(self.key_columns) == 1:
            return (key,)
        assert isinstance(key, tuple)
        return key

    def _insert_source(self, conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
        cols = self.key_idents
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("insert into {} ({}) values ({})").format(
                    sql.Identifier(self.source_schema, self.source_table),
                    cols,
                    sql.SQL(", ").join(sql.Placeholder() for _ in self.key_columns),
                ),
                rows,
            )

    def _key_arrays(self, rows: list[tuple[Any, ...]]) -> list[list[Any]]:
        return [[r[i] for r in rows] for i in range(len(self.key_columns))]

    def _unnest(self) -> sql.Composed:
        """``unnest(%s, %s, ...) with ordinality as k(<keys>, ord)``."""
        return sql.SQL("unnest({}) with ordinality as k({}, cf_ord)").format(
            sql.SQL(", ").join(sql.Placeholder() for _ in self.key_columns),
            sql.SQL(", ").join(sql.Identifier(f"k{i}") for i in range(len(self.key_columns))),
        )

    def _k_list(self) -> sql.Composed:
        return sql.SQL(", ").join(
            sql.SQL("k.{}").format(sql.Identifier(f"k{i}")) for i in range(len(self.key_columns))
        )

    def _insert_events(self, ulid_sql: str) -> sql.Composed:
        """One statement that numbers the rows (``%s`` shard, then key arrays) in order."""
        return sql.SQL(
            "insert into {feed} (shard_id, ulid, {keys}) "
            "select %s, {ulid}, {klist} from (select * from {unnest} order by cf_ord) k"
        ).format(
            feed=self.q("feed"),
            keys=self.key_idents,
            ulid=sql.SQL(ulid_sql),
            klist=self._k_list(),
            unnest=self._unnest(),
        )

    def _write_blocking(
        self,
        conn: psycopg.Connection[Any],
        shard: int,
        rows: list[tuple[Any, ...]],
        hint: datetime | None,
        step: Callable[..., None],
        source: bool,
    ) -> None:
        with self.client.write(conn, shard, time_hint=hint) as w:
            step(
                "locked",
                write_id=w.write_id,
                backend_pid=conn.info.backend_pid,
                first_ulid=w.first_ulid.hex(),
            )
            if source:
                self._insert_source(conn, rows)
            if len(rows) <= 8:
                w.insert_events(rows)
            else:  # one statement numbering the rows in order, as an application would
                conn.execute(self._insert_events(w.ulid_sql), [shard, *self._key_arrays(rows)])
            step("inserted", write_id=w.write_id)
            step("committing", write_id=w.write_id)
        # update_state and COMMIT went in one round trip (protocol 4.4, B4).

    def _write_blocking_split(
        self,
        conn: psycopg.Connection[Any],
        shard: int,
        rows: list[tuple[Any, ...]],
        hint: datetime | None,
        step: Callable[..., None],
        delay_s: float,
    ) -> None:
        """The protocol by hand, with update_state and COMMIT in two round trips."""
        assert conn.autocommit
        client = self.client
        info = client.info(conn)
        try:
            locked = conn.execute(sql.SQL(f"call {info.q('lock')}(%s, %s)"), [shard, hint])
            _, high, start = locked.fetchone()  # type: ignore[misc]
            conn.execute("begin")
            self._insert_source(conn, rows)
            conn.execute(
                self._insert_events(client.ulid_sql(conn)), [shard, *self._key_arrays(rows)]
            )
            conn.execute(sql.SQL(f"select {info.q('update_state')}()"))
            time.sleep(delay_s)
            sent = time.monotonic()
            conn.execute("commit")
            step("split", first_ulid=bytes(high) + int(start).to_bytes(8, "big", signed=True),
                 commit_sent=sent, committed=time.monotonic())  # fmt: skip
        except BaseException:
            if not (conn.closed or conn.broken):
                conn.execute("rollback")
                client.release(conn)
            raise

    def _write_outbox(
        self,
        conn: psycopg.Connection[Any],
        shard: int,
        rows: list[tuple[Any, ...]],
        hint: datetime | None,
        step: Callable[..., None],
        source: bool,
    ) -> None:
        assert conn.autocommit
        try:
            conn.execute("begin")
            if source:
                self._insert_source(conn, rows)
            if len(rows) <= 8:
                self.client.insert_outbox(conn, shard, rows, time_hint=hint)
            else:
                conn.execute(
                    sql.SQL(
                        "insert into {outbox} (shard_id, time_hint, {keys}) "
                        "select %s, coalesce(%s, now()), {klist} "
                        "from (select * from {unnest} order by cf_ord) as k"
                    ).format(
                        outbox=self.q("outbox"),
                        keys=self.key_idents,
                        klist=self._k_list(),
                        unnest=self._unnest(),
                    ),
                    [shard, hint, *self._key_arrays(rows)],
                )
            step("inserted")
            step("committing")
            conn.execute("commit")
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.execute("rollback")
            raise

    # -- reading ----------------------------------------------------------------------

    def move_outbox(self, conn: psycopg.Connection[Any], shard: int, max_rows: int = 10000) -> int:
        if self.mode != "outbox":
            return 0
        return self.client.move_outbox(conn, shard, max_rows)

    def read_page(
        self, conn: psycopg.Connection[Any], shard: int, cursor: bytes, page_size: int
    ) -> list[Event]:
        """One page after ``cursor`` (the client moves the outbox when at the head)."""
        page = self.client.read_page(conn, shard, cursor, page_size)
        return [(e.ulid, self.key_of(e.key)) for e in page.events]

    def read_raw(
        self, conn: psycopg.Connection[Any], shard: int, cursor: bytes, page_size: int
    ) -> list[Event]:
        """``read_feed`` alone: never moves the outbox (for barrier checks)."""
        rows = conn.execute(
            sql.SQL("select ulid, {} from {}(%s, %s, %s)").format(
                self.key_idents, self.q("read_feed")
            ),
            [shard, cursor, page_size],
        ).fetchall()
        return [(bytes(r[0]), self.key_of(r[1:])) for r in rows]

    def safe_point(self, conn: psycopg.Connection[Any], shard: int) -> tuple[bytes, bytes, int]:
        sp = self.client.safe_point(conn, shard)
        return sp.safe_point, sp.head, sp.pending

    def final(self, conn: psycopg.Connection[Any]) -> dict[int, list[Event]]:
        """The whole feed table, per shard in ULID order (after the outbox is moved)."""
        if self.mode == "outbox":
            shards = [
                r[0]
                for r in conn.execute(
                    sql.SQL("select distinct shard_id from {}").format(self.q("outbox"))
                )
            ]
            for s in shards:
                while self.move_outbox(conn, s, 1_000_000):
                    pass
        out: dict[int, list[Event]] = {}
        for r in conn.execute(
            sql.SQL("select shard_id, ulid, {} from {} order by shard_id, ulid").format(
                self.key_idents, self.q("feed")
            )
        ):
            out.setdefault(r[0], []).append((bytes(r[1]), self.key_of(r[2:])))
        return out

    def outbox_count(self, conn: psycopg.Connection[Any], shard: int | None = None) -> int:
        if self.mode != "outbox":
            return 0
        row = conn.execute(
            sql.SQL("select count(*) from {} where %s::int is null or shard_id = %s").format(
                self.q("outbox")
            ),
            [shard, shard],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def session(self, conn: psycopg.Connection[Any], shard: int, pid: int) -> dict[str, Any]:
        """The session row of backend ``pid`` on ``shard`` (blocking mode)."""
        cur = conn.execute(
            sql.SQL(
                "select write_id, state, generation, first_ulid from {}"
                " where shard_id = %s and session_id = %s"
            ).format(self.q("session")),
            [shard, pid],
        )
        cols = [d.name for d in cur.description or []]
        row = cur.fetchone()
        assert row is not None, f"no session row for backend {pid} on shard {shard}"
        return dict(zip(cols, row, strict=True))

    def generation(self, conn: psycopg.Connection[Any], shard: int) -> int:
        row = conn.execute(
            sql.SQL("select generation from {} where shard_id = %s").format(self.q("state")),
            [shard],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def incidents(self, conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
        cur = conn.execute(
            sql.SQL(
                "select shard_id, generation, reason, holder_session_id, holder_write_id, "
                "waited_ms from {} order by detected_at"
            ).format(self.q("incident"))
        )
        cols = [d.name for d in cur.description or []]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
