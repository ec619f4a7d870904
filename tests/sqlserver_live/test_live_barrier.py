"""The read barrier on a real SQL Server (protocol section 7, invariant R1)."""

from __future__ import annotations

from typing import Any

from tests.support.sqlserver_live import LiveFeed, Server, run

from changefeed.client import Barrier


def test_blocking_barrier_releases_at_once_after_a_commit(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    assert feed.client.barrier_acquire(conn, 0) == Barrier(0, bytes(16), None)
    feed.write(conn, 0, [[1]])
    barrier = feed.client.barrier_acquire(conn, 0)
    # The highest committed ULID, not the head (the end of the block): protocol 2.
    assert barrier == Barrier(0, feed.read_all(conn, 0)[-1].ulid, None)
    assert barrier.position < feed.client.safe_point(conn, 0).head
    assert feed.client.barrier_check(conn, barrier) is True
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [1]
    ahead = Barrier(0, barrier.position[:8] + b"\x7f" + bytes(7), None)
    assert feed.client.barrier_check(conn, ahead) is False


def test_a_write_in_flight_does_not_hold_the_blocking_barrier(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """The position covers what committed before the call: a write whose block is
    allocated (the head is past it) but whose transaction is open does not count, and is
    neither waited for nor needed for the barrier to release."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    with mssql.connection() as writer:
        feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        barrier = feed.client.barrier_acquire(conn, 0)
        assert barrier == Barrier(0, feed.read_all(conn, 0)[-1].ulid, None)
        assert feed.client.barrier_check(conn, barrier) is True
        feed.client.release(writer)
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [1]


def test_outbox_barrier_waits_for_the_move(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_int")
    with mssql.connection() as late:
        # a transaction that has not committed when the barrier is acquired (its row has a
        # smaller order_sequence) does not hold the barrier: R1 covers earlier commits only
        run(
            late,
            "begin transaction;\n"
            f"insert into {feed.obj('outbox')} (shard_id, {feed.keys_sql}) values (0, 2);",
        )
        feed.outbox_insert(conn, 0, [[1]])
        barrier = feed.client.barrier_acquire(conn, 0)
        assert barrier.outbox_sequence is not None
        assert feed.client.barrier_check(conn, barrier) is False  # row 1 is still in the outbox
        assert [e.key[0] for e in feed.client.read_page(conn, 0).events] == [1]  # moves the outbox
        assert feed.client.barrier_check(conn, barrier) is True
        run(late, "commit;")
    later = feed.client.barrier_acquire(conn, 0)
    assert feed.client.barrier_check(conn, later) is False  # row 2 committed before it
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [1, 2]
    assert feed.client.barrier_check(conn, later) is True
