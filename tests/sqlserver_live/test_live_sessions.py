"""Writer sessions, the safe point and tombstones on a real SQL Server (protocol
section 6): the safe point never passes a pending write (S2), a tombstone and the
writer's commit race with exactly one winner (S3), and a tombstoned write's commit fails
with a clear error."""

from __future__ import annotations

import threading
from typing import Any

from tests.sqlserver_live.livekit import (
    BLOCK,
    LiveFeed,
    Server,
    expect_error,
    lit,
    run,
)


def _first_ulid(high: bytes, low_: int) -> bytes:
    return high + low_.to_bytes(8, "big", signed=True)


def test_the_safe_point_never_passes_a_pending_write(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    head = feed.safe_point(conn, 0)["head"]
    with mssql.connection() as writer, mssql.connection() as reader:
        w = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        sp = feed.safe_point(reader, 0)
        assert sp["pending"] == 1 and sp["safe_point"] == head
        assert sp["safe_point"] < _first_ulid(w.ulid_high, w.ulid_low)
        assert [r[1] for r in feed.read_all(reader, 0)] == [1]
        run(writer, feed.publish_sql())
        sp = feed.safe_point(reader, 0)
        assert sp["pending"] == 0
        assert sp["safe_point"] == sp["head"] == _first_ulid(w.ulid_high, w.ulid_low + BLOCK - 1)
        assert [r[1] for r in feed.read_all(reader, 0)] == [1, 2]


def test_the_pending_term_bounds_the_safe_point(fresh: Any, mssql: Server, conn: Any) -> None:
    """Defence in depth (S2): were a pending write's block ever at or below the head, the
    safe point would stop just below it, with a correct 128-bit decrement."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    head = feed.safe_point(conn, 0)["head"]
    with mssql.connection() as writer:
        w = feed.lock(writer, 0)
        session = f"where shard_id = 0 and write_id = {lit(w.write_id)}"
        for first in (head, head[:8] + bytes(8), head[:8] + b"\x80" + bytes(7)):
            run(conn, f"update {feed.obj('session')} set first_ulid = {lit(first)} {session};")
            below = int.from_bytes(first, "big") - 1
            expected = min(int.from_bytes(head, "big"), below).to_bytes(16, "big")
            assert feed.safe_point(conn, 0)["safe_point"] == expected
        feed.abort(writer)
    assert feed.safe_point(conn, 0)["safe_point"] == head


def test_a_tombstoned_write_cannot_commit(fresh: Any, mssql: Server, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    with mssql.connection() as writer, mssql.connection() as reader:
        w = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
        sp = feed.safe_point(reader, 0)
        assert sp["pending"] == 1
        assert sp["oldest_pending_session_id"] == w.session_id
        assert str(sp["oldest_pending_write_id"]).lower() == str(w.write_id)
        assert feed.tombstone(reader, 0, w.session_id, w.write_id) is True
        assert feed.tombstone(reader, 0, w.session_id, w.write_id) is False
        assert feed.safe_point(reader, 0)["pending"] == 0
        expect_error(writer, feed.publish_sql(), number=51012, text="was abandoned (tombstoned)")
        feed.abort(writer)
        [incident] = feed.incidents(conn, 0)
        assert incident["reason"] == "tombstone" and incident["holder_session_id"] == w.session_id
        state = feed.state(conn, 0)
        assert state is not None and state["generation"] == 1
        assert feed.read_all(reader, 0) == []
        # the shard goes on under the next lock generation
        feed.write(writer, 0, [[2]])
        assert [r[1] for r in feed.read_all(reader, 0)] == [2]
        # a committed write cannot be tombstoned
        w2 = feed.write(writer, 0, [[3]])
        assert feed.tombstone(reader, 0, w2.session_id, w2.write_id) is False


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
                outcome["tombstone"] = feed.tombstone(reader, 0, w.session_id, w.write_id)

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
                assert "was abandoned (tombstoned)" in str(outcome["commit"])
                feed.abort(writer)
        assert sorted(r[1] for r in feed.read_all(reader, 0)) == committed
    incidents = feed.incidents(conn, 0)
    assert len(incidents) == 12 - len(committed)
    state = feed.state(conn, 0)
    assert state is not None and state["generation"] == 12 - len(committed)
