"""The read barrier on a real SQL Server (protocol section 7, invariant R1)."""

from __future__ import annotations

from typing import Any

from tests.support.sqlserver_live import LiveFeed, Server, run


def test_blocking_barrier_releases_at_once_after_a_commit(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    assert feed.barrier_acquire(conn, 0) == (bytes(16), None)
    feed.write(conn, 0, [[1]])
    barrier = feed.barrier_acquire(conn, 0)
    # The highest committed ULID, not the head (the end of the block): protocol 2.
    assert barrier == (feed.read_all(conn, 0)[-1][0], None)
    assert barrier[0] < feed.safe_point(conn, 0)["head"]
    assert feed.barrier_check(conn, 0, barrier) is True
    assert [r[1] for r in feed.read_all(conn, 0)] == [1]
    ahead = (barrier[0][:8] + b"\x7f" + bytes(7), None)
    assert feed.barrier_check(conn, 0, ahead) is False


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
        barrier = feed.barrier_acquire(conn, 0)
        assert barrier == (feed.read_all(conn, 0)[-1][0], None)
        assert feed.barrier_check(conn, 0, barrier) is True
        feed.abort(writer)
    assert [r[1] for r in feed.read_all(conn, 0)] == [1]


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
        barrier = feed.barrier_acquire(conn, 0)
        assert barrier[1] is not None
        assert feed.barrier_check(conn, 0, barrier) is False  # row 1 is still in the outbox
        assert [r[1] for r in feed.read_feed(conn, 0)] == [1]  # moves the outbox
        assert feed.barrier_check(conn, 0, barrier) is True
        run(late, "commit;")
    later = feed.barrier_acquire(conn, 0)
    assert feed.barrier_check(conn, 0, later) is False  # row 2 committed before it
    assert [r[1] for r in feed.read_all(conn, 0)] == [1, 2]
    assert feed.barrier_check(conn, 0, later) is True
