"""Writer sessions, the safe point and tombstones on a real SQL Server (protocol
section 6): the safe point never passes a pending write (S2), also while the next writer
allocates and commits during a predecessor's commit (4.3, 4.4), a tombstone and the
writer's commit race with exactly one winner (S3), and a tombstoned write's commit fails
with a clear error."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    Server,
    expect_error,
    lit,
    run,
)

from changefeed.dialects.sqlserver import client as sqlserver


def _first_ulid(high: bytes, low_: int) -> bytes:
    return high + low_.to_bytes(8, "big", signed=True)


def _below(ulid: bytes) -> bytes:
    """The ULID just below ``ulid`` (128-bit decrement)."""
    return (int.from_bytes(ulid, "big") - 1).to_bytes(16, "big")


def test_the_safe_point_never_passes_a_pending_write(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    head = feed.client.safe_point(conn, 0).head
    with mssql.connection() as writer, mssql.connection() as reader:
        w = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        sp = feed.client.safe_point(reader, 0)
        # The lock call moved the head past the block; the pending session holds the safe
        # point just below it, at or above the previous head.
        assert sp.head == _first_ulid(w.ulid_high, w.block_start + BLOCK - 1)
        assert sp.pending == 1
        assert sp.safe_point == _below(_first_ulid(w.ulid_high, w.block_start)) >= head
        assert [r.key[0] for r in feed.read_all(reader, 0)] == [1]
        run(writer, feed.publish_sql())
        sp = feed.client.safe_point(reader, 0)
        assert sp.pending == 0
        assert sp.safe_point == sp.head == _first_ulid(w.ulid_high, w.block_start + BLOCK - 1)
        assert [r.key[0] for r in feed.read_all(reader, 0)] == [1, 2]


def test_the_pending_term_bounds_the_safe_point(fresh: Any, mssql: Server, conn: Any) -> None:
    """S2: a pending write's block is at or below the head (its lock call moved the head
    past it), and the safe point stops just below its first ULID, with a correct 128-bit
    decrement at the edges of ulid_low."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    head = feed.client.safe_point(conn, 0).head
    with mssql.connection() as writer:
        w = feed.lock(writer, 0)
        allocated = feed.client.safe_point(conn, 0).head
        assert allocated == _first_ulid(w.ulid_high, w.block_start + BLOCK - 1)
        session = f"where shard_id = 0 and write_id = {lit(w.write_id)}"
        for first in (head, head[:8] + bytes(8), head[:8] + b"\x80" + bytes(7)):
            run(conn, f"update {feed.obj('session')} set first_ulid = {lit(first)} {session};")
            assert feed.client.safe_point(conn, 0).safe_point == min(allocated, _below(first))
        feed.client.release(writer)
    # Released: the block is abandoned, never committed, and the safe point moves over it.
    assert feed.client.safe_point(conn, 0).safe_point == allocated


def test_the_next_writer_allocates_while_the_previous_commit_is_in_flight(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """Protocol 2 (4.3, 4.4): A runs update_state but has not committed yet. B's lock call
    neither reaps A (its session row is locked: readpast) nor waits for A's commit, and
    allocates above A's block. B may even commit first: the safe point stays below A's
    block until A commits, so no reader sees B's events before A's."""
    feed: LiveFeed = fresh("blocking_int")
    hint = dt.datetime(2024, 2, 29, 12, 0, 0)
    with (
        mssql.connection() as a,
        mssql.connection(timeout=30) as b,
        mssql.connection() as reader,
    ):
        wa = feed.lock(a, 0, hint)
        run(a, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
        run(a, f"exec {feed.obj('update_state')};")  # the commit is still to come

        started = time.monotonic()
        wb = feed.lock(b, 0, hint, stall_timeout_ms=10000, lock_probe_ms=20)
        assert time.monotonic() - started < 2
        # Same time hint: B continues the state row, which A's lock call moved past A's block.
        assert (wb.ulid_high, wb.block_start) == (wa.ulid_high, wa.block_start + BLOCK)
        below_a = _below(_first_ulid(wa.ulid_high, wa.block_start))

        sp = feed.client.safe_point(reader, 0)
        assert sp.pending == 2 and sp.safe_point == below_a
        assert sp.head == _first_ulid(wb.ulid_high, wb.block_start + BLOCK - 1)

        # B commits before A: its events are committed, yet the safe point stays below A.
        run(b, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        run(b, feed.publish_sql())
        sp = feed.client.safe_point(reader, 0)
        assert sp.pending == 1 and sp.safe_point == below_a
        assert feed.read_all(reader, 0) == []

        run(a, "commit;")
        sp = feed.client.safe_point(reader, 0)
        assert sp.pending == 0 and sp.safe_point == sp.head
        assert [r.key[0] for r in feed.read_all(reader, 0)] == [1, 2]
    [session_a] = run(
        conn,
        f"select state, end_reason from {feed.obj('session')} "
        f"where shard_id = 0 and write_id = {lit(wa.write_id)};",
    )
    assert session_a == (1, "committed")
    assert feed.incidents(conn, 0) == []


def test_a_tombstoned_write_cannot_commit(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    with mssql.connection() as writer, mssql.connection() as reader:
        w = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
        assert feed.client.safe_point(reader, 0).pending == 1
        # SafePoint has no oldest pending write; the procedure's row names it
        names, rows = sqlserver.execute(reader, f"exec {feed.obj('safe_point')} @shard_id = 0;")
        oldest = dict(zip(names, rows[0], strict=True))
        assert oldest["oldest_pending_session_id"] == w.session_id
        assert str(oldest["oldest_pending_write_id"]).lower() == str(w.write_id)
        assert feed.client.tombstone(reader, 0, w.session_id, w.write_id) is True
        assert feed.client.tombstone(reader, 0, w.session_id, w.write_id) is False
        assert feed.client.safe_point(reader, 0).pending == 0
        expect_error(
            writer,
            feed.publish_sql(),
            number=51012,
            text="was abandoned (tombstoned; lock generation 0 -> 1)",
        )
        feed.client.release(writer)
        [incident] = feed.incidents(conn, 0)
        assert incident["reason"] == "tombstone" and incident["holder_session_id"] == w.session_id
        state = feed.state(conn, 0)
        assert state is not None and state["generation"] == 1
        assert feed.read_all(reader, 0) == []
        # the shard goes on under the next lock generation
        feed.write(writer, 0, [[2]])
        assert [r.key[0] for r in feed.read_all(reader, 0)] == [2]
        # a committed write cannot be tombstoned
        w2 = feed.write(writer, 0, [[3]])
        assert feed.client.tombstone(reader, 0, w2.session_id, w2.write_id) is False


def test_tombstone_and_commit_race_with_exactly_one_winner(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    import pymssql

    feed: LiveFeed = fresh("blocking_int")
    committed: list[int] = []
    with mssql.connection() as writer, mssql.connection() as reader:
        for key in range(12):
            w = feed.lock(writer, 0)
            run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[key]]))
            go = threading.Barrier(2)
            outcome: dict[str, Any] = {}

            def commit(go: threading.Barrier = go, outcome: dict[str, Any] = outcome) -> None:
                go.wait()
                try:
                    run(writer, feed.publish_sql())
                    outcome["commit"] = True
                except pymssql.Error as exc:
                    outcome["commit"] = exc

            def tombstone(
                w: Any = w, go: threading.Barrier = go, outcome: dict[str, Any] = outcome
            ) -> None:
                go.wait()
                outcome["tombstone"] = feed.client.tombstone(reader, 0, w.session_id, w.write_id)

            threads = [threading.Thread(target=commit), threading.Thread(target=tombstone)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            if outcome["commit"] is True:
                assert outcome["tombstone"] is False, key
                committed.append(key)
            else:
                assert outcome["tombstone"] is True, (key, outcome)
                assert "was abandoned (tombstoned;" in str(outcome["commit"])
                feed.client.release(writer)
        assert sorted(r.key[0] for r in feed.read_all(reader, 0)) == committed
    incidents = feed.incidents(conn, 0)
    assert len(incidents) == 12 - len(committed)
    state = feed.state(conn, 0)
    assert state is not None and state["generation"] == 12 - len(committed)


def test_a_tombstone_keeps_the_newest_1000_incidents_of_its_shard(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """Issue 14, item 3: the incident table is bounded. 1,100 older incidents of shard 0
    (generations -1100 to -1) and one of shard 1; the tombstone that records generation 0
    deletes shard 0's incidents of generation -1000 and below, and nothing of shard 1."""
    feed: LiveFeed = fresh("blocking_int")
    columns = (
        "(shard_id, generation, detected_at, reason, holder_session_id, holder_write_id, "
        "detected_by_session_id, waited_ms)"
    )
    rows = [f"(0, {g}, sysutcdatetime(), N'stall', null, null, 1, 0)" for g in range(-1100, 0)]
    for chunk in range(0, len(rows), 500):  # at most 1,000 rows per values clause
        values = ", ".join(rows[chunk : chunk + 500])
        run(conn, f"insert into {feed.obj('incident')} {columns} values {values};")
    run(conn, f"insert into {feed.obj('incident')} {columns} "
              "values (1, 5, sysutcdatetime(), N'stall', null, null, 1, 0);")  # fmt: skip
    with mssql.connection() as writer:
        w = feed.lock(writer, 0)
        assert feed.client.tombstone(conn, 0, w.session_id, w.write_id) is True
        feed.client.release(writer)
    generations = [i["generation"] for i in feed.incidents(conn, 0)]
    assert generations == list(range(-999, 1))
    assert [i["generation"] for i in feed.incidents(conn, 1)] == [5]
