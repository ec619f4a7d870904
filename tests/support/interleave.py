"""Transactions that change the same keys concurrently, for invariant O8 (docs/protocol.md
section 5): one key's events must be in the order in which their writes took effect.

Each history is two transactions on two connections. ``a`` first writes a key of its own
(its *marker*, so its block is recognisable and it holds an early ``order_sequence``),
then writes the shared key; ``b`` writes only the shared key. In outbox mode ``b`` writes
first and commits while ``a`` waits for the key's lock (a late commit: ``a`` took its first
outbox row before ``b`` took its only one, and commits after it); in blocking mode the
shard's lock lets one run before the other, whichever takes it first.

Every write appends its transaction's label to the row's ``val`` (an upsert that
re-inserts a deleted key starts again from the label), so the source itself records the
order in which the writes took effect: :func:`expected` reads it back and derives, per
key, the versions the feed must carry in order. The feed is read independently of the
client's readers (its table, in ULID order).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from tests.support.pg_feeds import block_of, q

from changefeed.client import PostgresFeed

#: val of the rows the first transaction inserts
INIT = "init"
COLUMNS = "id bigint primary key, val text not null"


@dataclass(frozen=True)
class History:
    """``a`` writes ``marker`` then ``key``; ``b`` writes ``key``. A write is an append
    (upsert with ``val || ',<label>'``) or a delete."""

    key: int
    marker: int
    a_deletes: bool
    b_deletes: bool


#: (1) both update: the source keeps a's value; (2) b deletes, a re-inserts: the key
#: exists; (3) b updates, a deletes: the key is gone. Each fails under a mover that orders
#: transactions by their first outbox row.
HISTORIES = (
    History(key=9, marker=20, a_deletes=False, b_deletes=False),
    History(key=5, marker=21, a_deletes=False, b_deletes=True),
    History(key=6, marker=22, a_deletes=True, b_deletes=False),
)
KEYS = tuple(h.key for h in HISTORIES)


def _change(
    conn: psycopg.Connection[Any], table: sql.Composable, key: int, label: str, delete: bool
) -> dict[str, Any] | None:
    """Apply one write; the row image it leaves (None: deleted)."""
    if delete:
        conn.execute(sql.SQL("delete from {} where id = %s").format(table), (key,))
        return None
    row = conn.execute(
        sql.SQL(
            "insert into {t} as s (id, val) values (%s, %s) on conflict (id) "
            "do update set val = s.val || ',' || %s returning id, val"
        ).format(t=table),
        (key, label, label),
    ).fetchone()
    assert row is not None
    return {"id": row[0], "val": row[1]}


class Writer:
    """One writer mode's way of writing the source and its events on one connection."""

    def __init__(self, mode: str, feed: PostgresFeed, table: sql.Composable) -> None:
        self.mode, self.feed, self.table = mode, feed, table

    def transaction(
        self, conn: psycopg.Connection[Any], steps: list[tuple[int, str, bool]],
        between: Callable[[int], None] = lambda i: None,
    ) -> None:  # fmt: skip
        """One transaction of ``steps`` (key, label, delete); ``between(i)`` runs before
        step ``i``, and ``between(len(steps))`` after the last one, before the commit.
        Events follow their writes (blocking: ``insert_events`` with the images; outbox
        without capture: ``insert_outbox``; capture: the trigger)."""
        if self.mode == "blocking":
            with self.feed.write(conn, 0) as w:
                for i, (key, label, delete) in enumerate(steps):
                    between(i)
                    image = _change(conn, self.table, key, label, delete)
                    w.insert_events([(key,)], images=[image])
                between(len(steps))
            return
        with conn.transaction():
            for i, (key, label, delete) in enumerate(steps):
                between(i)
                _change(conn, self.table, key, label, delete)
                if self.mode == "outbox":
                    self.feed.insert_outbox(conn, 0, [(key,)])
            between(len(steps))


def _wait_for_lock_wait(admin: psycopg.Connection[Any], pid: int, done: threading.Event) -> None:
    """Until backend ``pid`` waits for a lock (a row's or a key's)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not done.is_set():
        row = admin.execute(
            "select wait_event_type from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError(f"transaction a (pid {pid}) never waited for the shared key's lock")


def run(uri: str, mode: str, feed_id: str) -> None:
    """The initial rows (one transaction), then every history of :data:`HISTORIES`."""
    schema, name = feed_id.split(".", 1)
    writer = Writer(mode, PostgresFeed(feed_id), sql.Identifier(schema, name))
    with psycopg.connect(uri, autocommit=True) as admin:
        a = psycopg.connect(uri, autocommit=True)
        b = psycopg.connect(uri, autocommit=True)
        try:
            writer.transaction(a, [(k, INIT, False) for k in KEYS])
            for h in HISTORIES:
                _history(admin, writer, a, b, h)
        finally:
            a.close()
            b.close()


def _history(
    admin: psycopg.Connection[Any], writer: Writer, a: psycopg.Connection[Any],
    b: psycopg.Connection[Any], h: History,
) -> None:  # fmt: skip
    marked, go, done = threading.Event(), threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def between(i: int) -> None:
        if i == 1:  # a has written its marker
            marked.set()
            assert go.wait(30), "b never let a go on"

    def run_a() -> None:
        try:
            writer.transaction(a, [(h.marker, "a", False), (h.key, "a", h.a_deletes)], between)
        except BaseException as exc:  # re-raised by the caller
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run_a)
    thread.start()
    assert marked.wait(30), "a never wrote its marker"
    if writer.mode == "blocking":
        # a holds the shard's lock: b's lock call waits for it, whichever order they meet.
        go.set()
        writer.transaction(b, [(h.key, "b", h.b_deletes)])
    else:

        def let_a_wait(i: int) -> None:
            if i == 1:  # b has written the key and not committed: a now waits for its lock
                go.set()
                _wait_for_lock_wait(admin, a.info.backend_pid, done)

        writer.transaction(b, [(h.key, "b", h.b_deletes)], let_a_wait)
    thread.join(60)
    if failure:
        raise failure[0]


def source_rows(conn: psycopg.Connection[Any], feed_id: str) -> dict[int, str]:
    schema, name = feed_id.split(".", 1)
    rows = conn.execute(
        sql.SQL("select id, val from {}").format(sql.Identifier(schema, name))
    ).fetchall()
    return {int(k): str(v) for k, v in rows}


def expected(source: dict[int, str]) -> dict[int, list[tuple[str, str | None]]]:
    """Per shared key, its writes in the order they took effect: (the transaction's label,
    the row's val after it, None: deleted). Of the two orders of ``a`` and ``b``, the
    one that leaves the row the source has (each write leaves a different row)."""
    out: dict[int, list[tuple[str, str | None]]] = {}
    for h in HISTORIES:
        candidates = [_versions(h, order) for order in (("a", "b"), ("b", "a"))]
        matching = [c for c in candidates if c[-1][1] == source.get(h.key)]
        assert len(matching) == 1, (h, candidates, source.get(h.key))
        out[h.key] = matching[0]
    return out


def _versions(h: History, order: tuple[str, str]) -> list[tuple[str, str | None]]:
    rows: list[tuple[str, str | None]] = [(INIT, INIT)]
    for label in order:
        previous = rows[-1][1]
        if h.a_deletes if label == "a" else h.b_deletes:
            rows.append((label, None))
        else:
            rows.append((label, label if previous is None else f"{previous},{label}"))
    return rows


def feed_versions(
    conn: psycopg.Connection[Any], names: dict[str, str], images: bool
) -> dict[int, list[tuple[str, str | None]]]:
    """Per shared key, its events in ULID order: (the writing transaction's label, the
    image's val, None for a delete marker or an event without image). A transaction is
    told by its block: ``a``'s block holds its marker key, the first one holds them all."""
    extra = ", row_image ->> 'val', row_deleted" if images else ", null, null"
    events = conn.execute(
        f"select ulid, id{extra} from {q(names['feed'])} order by ulid"
    ).fetchall()
    blocks: dict[tuple[bytes, int], set[int]] = {}
    for ulid, key, _, _ in events:
        blocks.setdefault(block_of(bytes(ulid)), set()).add(int(key))
    markers = {h.marker for h in HISTORIES}
    out: dict[int, list[tuple[str, str | None]]] = {}
    for ulid, key, val, _deleted in events:
        if int(key) in markers:
            continue
        members = blocks[block_of(bytes(ulid))]
        label = "a" if members & markers else INIT if len(members) > 1 else "b"
        out.setdefault(int(key), []).append((label, val))
    return out
