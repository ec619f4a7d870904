"""R1: once a barrier acquired after a commit is released, a read up to the safe point
includes that commit. In outbox mode the barrier stays closed until the outbox rows
committed before it have been moved into the feed.

Reads here call ``read_feed`` only (never the client's moving ``read_page``), so the
barrier alone has to guarantee what the read sees.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pytest
from tests.support.faults.checker import ZERO_ULID, History, check
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import ThreadWrite, write_once

pytestmark = pytest.mark.postgres


def read_all_raw(
    kit: FeedKit,
    conn: psycopg.Connection[Any],
    history: History,
    reader: str,
    cursor: bytes,
    seen: set[Any],
    page_size: int = 50,
) -> bytes:
    while True:
        page = kit.read_raw(conn, 0, cursor, page_size)
        history.record_page(reader, 0, cursor, page_size, page)
        if not page:
            return cursor
        seen.update(k for _, k in page)
        cursor = page[-1][0]


def test_outbox_barrier_stays_closed_until_moved(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any]
) -> None:
    kit = make_feed("outbox")
    history = History()
    wconn, rconn, mconn = connect(), connect(), connect()
    assert write_once(kit, wconn, history, 0, [1, 2])
    kit.move_outbox(mconn, 0)
    assert write_once(kit, wconn, history, 0, [3])
    barrier = kit.client.barrier_acquire(rconn, 0)
    assert barrier.outbox_sequence is not None
    seen: set[Any] = set()
    for _ in range(10):
        assert not kit.client.barrier_check(rconn, barrier)
        read_all_raw(kit, rconn, history, "r", ZERO_ULID, seen)
        assert seen == {1, 2}  # the unmoved commit is not readable yet
        time.sleep(0.01)
    assert kit.move_outbox(mconn, 0) == 1
    assert kit.client.barrier_check(rconn, barrier)
    read_all_raw(kit, rconn, history, "r", ZERO_ULID, seen)
    assert seen == {1, 2, 3}
    check(history, kit.final(admin))


def test_blocking_barrier_is_released_at_once(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any]
) -> None:
    kit = make_feed("blocking", stall_timeout_ms=5000)
    history = History()
    wconn, rconn = connect(), connect()
    assert write_once(kit, wconn, history, 0, [1])
    # A pending write (lock taken, not committed) does not hold the barrier back: it was
    # not committed before the barrier was acquired.
    held = ThreadWrite(kit, connect(), history, 0, [2], hold="inserted")
    held.wait_for("inserted")
    barrier = kit.client.barrier_acquire(rconn, 0)
    assert barrier.outbox_sequence is None
    assert kit.client.barrier_check(rconn, barrier)
    seen: set[Any] = set()
    read_all_raw(kit, rconn, history, "r", ZERO_ULID, seen)
    assert seen == {1}
    held.release()
    assert held.join()
    check(history, kit.final(admin))


def diagnose(kit: FeedKit, conn: psycopg.Connection[Any], barrier: Any) -> str:
    safe_point, head, _ = kit.safe_point(conn, 0)
    text = f"safe point {safe_point.hex()} head {head.hex()}"
    if kit.mode == "outbox":
        rows = conn.execute(
            psycopg.sql.SQL(
                "select order_sequence, txid::text from {} where shard_id = 0 "
                "and order_sequence <= %s order by 1 limit 5"
            ).format(kit.q("outbox")),
            [barrier.outbox_sequence],
        ).fetchall()
        text += f"; unmoved outbox rows at or below the barrier: {rows}"
    return text


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_barriers_under_load(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any], mode: str
) -> None:
    """Writers write, a mover moves every 30 ms (outbox), and clients repeatedly write,
    acquire a barrier, wait for it *without moving*, and read: every transaction that
    committed before their acquire must be in what they have read (R1)."""
    kit = make_feed(mode, stall_timeout_ms=2000)
    history = History()
    stop = threading.Event()
    mover_stop = threading.Event()
    errors: list[BaseException] = []
    closed_polls = [0]
    barriers = [0]
    run_for = 1.5

    def writer(i: int) -> None:
        try:
            conn = connect()
            n = 0
            while not stop.is_set():
                write_once(kit, conn, history, 0, [i * 1_000_000 + n])
                n += 1
        except BaseException as exc:
            errors.append(exc)

    def mover() -> None:
        try:
            conn = connect()
            while not mover_stop.is_set():  # until every client has had its last barrier
                kit.move_outbox(conn, 0)
                time.sleep(0.03)
        except BaseException as exc:
            errors.append(exc)

    def client(i: int) -> None:
        try:
            conn, rconn = connect(), connect()
            rng = random.Random(i)
            cursor, seen = ZERO_ULID, set()
            n = 0
            while not stop.is_set():
                write_once(kit, conn, history, 0, [(10 + i) * 1_000_000 + n])
                n += 1
                acquired_at = time.monotonic()
                committed_before = {
                    k
                    for w in list(history.writes.values())
                    if w.outcome == "ok" and w.finished is not None and w.finished < acquired_at
                    for k in w.keys
                }
                barrier = kit.client.barrier_acquire(rconn, 0)
                deadline = time.monotonic() + 10
                while not kit.client.barrier_check(rconn, barrier):
                    closed_polls[0] += 1
                    if time.monotonic() > deadline:
                        raise AssertionError(
                            f"the barrier {barrier} was never released: "
                            f"{diagnose(kit, rconn, barrier)}"
                        )
                    time.sleep(0.002)
                barriers[0] += 1
                cursor = read_all_raw(
                    kit, rconn, history, f"c{i}", cursor, seen, rng.randint(1, 30)
                )
                missing = committed_before - seen
                assert not missing, f"R1: released barrier, but {sorted(missing)[:5]} unread"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=client, args=(i,)) for i in range(2)]
    movers = [threading.Thread(target=mover)] if mode == "outbox" else []
    for t in threads + movers:
        t.start()
    time.sleep(run_for)
    stop.set()
    for t in threads:
        t.join(30)
    mover_stop.set()
    for t in movers:
        t.join(30)
    assert not errors, errors
    assert barriers[0] >= 2
    if mode == "outbox":
        assert closed_polls[0] > 0  # barriers really waited for the mover
    check(history, kit.final(admin))
