"""The stall-proof lock on a real SQL Server (protocol 4.2): a frozen holder, simulated by
a connection that took the lock, opened its transaction and went silent, is burned after
stall_timeout_ms; a moving queue is not; busy neighbouring shards do not hide a stall."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    Server,
    Threads,
    expect_error,
    run,
)


def test_a_frozen_holder_is_burned_and_cannot_commit(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    hint = dt.datetime(2024, 2, 29, 12, 0, 0)
    with mssql.connection() as holder, mssql.connection(timeout=30) as waiter:
        h = feed.lock(holder, 0, hint)
        run(holder, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
        # ... and the holder goes silent, keeping its lock, its pending session and an
        # uncommitted row in the feed's primary key.

        started = time.monotonic()
        w = feed.lock(waiter, 0, hint, stall_timeout_ms=1500, lock_probe_ms=20)
        waited = time.monotonic() - started
        assert 1.4 < waited < 8, waited

        # Same time hint, so the new block continues the state, which the holder's lock
        # call already moved past its block: no primary key collision with its
        # uncommitted row, and nothing for the burn to retire.
        assert (w.ulid_high, w.block_start) == (h.ulid_high, h.block_start + BLOCK)
        started = time.monotonic()
        run(waiter, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        run(waiter, feed.publish_sql())
        assert time.monotonic() - started < 5

        [incident] = feed.incidents(conn, 0)
        assert incident["generation"] == 0 and incident["reason"] == "stall"
        assert incident["holder_session_id"] == h.session_id
        assert str(incident["holder_write_id"]).lower() == str(h.write_id)
        assert incident["detected_by_session_id"] == w.session_id
        assert incident["waited_ms"] >= 1400
        state = feed.state(conn, 0)
        assert state is not None and state["generation"] == 1

        # The stalled holder wakes up: its commit fails, naming why.
        expect_error(
            holder,
            feed.publish_sql(),
            number=51012,
            text="was abandoned (stall; lock generation 0 -> 1)",
        )
        feed.client.release(holder)

    assert [r.key[0] for r in feed.read_all(conn, 0)] == [2]
    sp = feed.client.safe_point(conn, 0)
    assert sp.safe_point == sp.head and sp.pending == 0


def test_a_moving_queue_is_not_burned(fresh: Any, mssql: Server, conn: Any) -> None:
    """Three writers hold the lock ~0.8 s each; a fourth with stall_timeout_ms = 1500
    waits ~2.4 s in all, but sees progress in every window, so nobody is burned."""
    feed: LiveFeed = fresh("blocking_int")
    holding = threading.Semaphore(0)

    def slow_write(key: int) -> None:
        with mssql.connection() as c:
            feed.lock(c, 0)
            holding.release()
            run(c, "begin transaction;\n" + feed.insert_events_sql(0, [[key]]))
            time.sleep(0.8)
            run(c, feed.publish_sql())

    threads = Threads()
    threads.start(slow_write, 1)
    holding.acquire()
    threads.start(slow_write, 2)
    threads.start(slow_write, 3)
    time.sleep(0.2)  # let them queue
    with mssql.connection() as c:
        feed.lock(c, 0, stall_timeout_ms=1500, lock_probe_ms=20)
        run(c, "begin transaction;\n" + feed.insert_events_sql(0, [[4]]))
        run(c, feed.publish_sql())
    threads.join(60)
    assert feed.incidents(conn, 0) == []
    assert sorted(r.key[0] for r in feed.read_all(conn, 0)) == [1, 2, 3, 4]
    state = feed.state(conn, 0)
    assert state is not None and state["generation"] == 0


def test_busy_neighbouring_shards_do_not_hide_a_stall(fresh: Any, mssql: Server, conn: Any) -> None:
    """Progress is per shard: writers on shard 1 keep the feed's sequence moving, yet a
    frozen holder on shard 0 is burned on time."""
    feed: LiveFeed = fresh("blocking_int")
    stop = threading.Event()

    def busy() -> None:
        with mssql.connection() as c:
            key = 1000
            while not stop.is_set():
                feed.write(c, 1, [[key]])
                key += 1

    threads = Threads()
    threads.start(busy)
    try:
        with mssql.connection() as holder, mssql.connection(timeout=30) as waiter:
            feed.lock(holder, 0)
            run(holder, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
            started = time.monotonic()
            feed.lock(waiter, 0, stall_timeout_ms=1500, lock_probe_ms=20)
            assert time.monotonic() - started < 8
            run(waiter, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
            run(waiter, feed.publish_sql())
            feed.client.release(holder)
    finally:
        stop.set()
        threads.join(60)
    assert [i["reason"] for i in feed.incidents(conn, 0)] == ["stall"]
    assert feed.incidents(conn, 1) == []
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [2]
