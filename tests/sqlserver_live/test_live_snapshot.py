"""Snapshot requests on a real SQL Server (protocol 12.1, docs/sqlserver.md "Snapshots"):
snapshot_begin reserves one empty block under the state row's lock, above every block
allocated before (a pending write's too) and below every one allocated after, without
waiting for the shard's lock; its key bounds and its transaction are checked (51070,
51071); snapshot_finish finishes once; the reader role may request, the writer may not;
a feed registered before snapshots gets them from setup. Never run yet (no server here)."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest
from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    Server,
    expect_error,
    lit,
    member_of,
    q,
    run,
    scalar,
)

from changefeed.client import InvalidArgument, LockInTransaction, NeedsUpgrade

DENIED = 229
SNAPSHOT_KINDS = ("snapshot", "pk_snapshot", "snapshot_begin", "snapshot_finish")


def _low(ulid: bytes) -> int:
    return int.from_bytes(ulid[8:], "big", signed=True)


def test_the_block_lies_above_a_pending_write_and_below_the_next(
    mssql: Server, fresh: Any, conn: Any
) -> None:
    """A write holds the shard's lock, pending: snapshot_begin neither waits for it nor
    writes a session row, and its block lies above the pending write's; the safe point
    stays below the pending write until it commits, then reaches the block's end; the
    next write allocates above the block."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]], dt.datetime(2024, 1, 1))
    sessions = feed.count(conn, "session")
    with mssql.connection() as writer:
        pending = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[2]]))
        started = time.monotonic()
        request = feed.client.snapshot_begin(conn, 0)
        assert time.monotonic() - started < 2.0, "snapshot_begin waited for the shard's lock"
        pending_last = pending.ulid_high + (pending.block_start + BLOCK - 1).to_bytes(8, "big")
        assert request.first_ulid > pending_last and _low(request.first_ulid) % BLOCK == 0
        assert request.last_ulid[:8] == request.first_ulid[:8]
        assert _low(request.last_ulid) == _low(request.first_ulid) + BLOCK - 1
        assert (request.shard_id, request.key_from, request.key_to) == (0, None, None)
        assert request.finished_at is None and request.rows_landed is None
        assert feed.count(conn, "session") == sessions + 1  # the pending write's, none more
        state = feed.state(conn, 0)
        assert state is not None and bytes(state["head"]) == request.last_ulid
        assert feed.client.safe_point(conn, 0).safe_point < pending.first_ulid
        run(writer, feed.publish_sql())
    point = feed.client.safe_point(conn, 0)
    assert (point.safe_point, point.head, point.pending) == (request.last_ulid,) * 2 + (0,)
    after = feed.write(conn, 0, [[3]])
    assert after.first_ulid > request.last_ulid
    assert [e.key[0] for e in feed.read_all(conn, 0)] == [1, 2, 3]  # the block holds no event


def test_an_outbox_feed_moves_later_rows_above_the_block(fresh: Any, conn: Any) -> None:
    """Rows moved before the request lie below its block, rows moved after it above; a
    shard without a state row gets one (and is listed by shards)."""
    feed: LiveFeed = fresh("outbox_int")
    feed.outbox_insert(conn, 0, [[1]])
    [moved] = feed.read_all(conn, 0)
    feed.outbox_insert(conn, 0, [[2]])  # committed, not moved yet
    request = feed.client.snapshot_begin(conn, 0)
    assert moved.ulid < request.first_ulid
    later = feed.read_all(conn, 0, moved.ulid)
    assert [e.key[0] for e in later] == [2] and later[0].ulid > request.last_ulid
    assert feed.state(conn, 5) is None
    elsewhere = feed.client.snapshot_begin(conn, 5)
    assert feed.state(conn, 5) is not None and 5 in feed.client.shards(conn)
    assert elsewhere.snapshot_id > request.snapshot_id
    assert [s.snapshot_id for s in feed.client.snapshots(conn, pending_only=True)] == [
        request.snapshot_id, elsewhere.snapshot_id]  # fmt: skip


def test_key_bounds_are_json_arrays_of_one_scalar_per_key_column(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_composite")  # tenant_id, sku, version
    begin = feed.obj("snapshot_begin")
    good = '  \n\t["0f8fad5b-d9cb-469f-a165-70867728950e", "SKU-1", 7]'
    run(conn, f"exec {begin} @shard_id = 0, @key_from = {lit(good)}, @key_to = null;")
    [request] = feed.client.snapshots(conn)
    assert request.key_from == good and request.key_to is None
    form = "a JSON array of 3 values (the key tenant_id, sku, version), got "
    for bad in ('{"tenant_id": 1}', "[1, 2]", "[1, 2, 3, 4]", "[1, null, 3]", "[1, [2], 3]",
                '[1, {"a": 2}, 3]', "[1, 2, 3, null]", "x", "", "7"):  # fmt: skip
        for param in ("@key_from", "@key_to"):
            sql = f"exec {begin} @shard_id = 0, {param} = {lit(bad)};"
            message = expect_error(conn, sql, number=51070, text=f"{param} must be NULL or {form}")
            assert f"{form}{bad}" in message, message
    expect_error(conn, f"exec {begin} @shard_id = null;", number=51070, text="@shard_id")
    assert len(feed.client.snapshots(conn)) == 1  # nothing recorded by a refused call
    with pytest.raises(InvalidArgument, match="key_from must be None or a list of 3 values"):
        feed.client.snapshot_begin(conn, 0, key_from=["a"])


def test_snapshot_begin_refuses_a_transaction_of_the_caller(fresh: Any, conn: Any) -> None:
    """It would hold the state row, and every writer of the shard, until the caller's
    commit; IMPLICIT_TRANSACTIONS would do the same."""
    feed: LiveFeed = fresh("blocking_int")
    begin = feed.obj("snapshot_begin")
    try:
        expect_error(conn, f"begin transaction;\nexec {begin} @shard_id = 0;", number=51071,
                     text="outside any transaction")  # fmt: skip
    finally:
        run(conn, "if @@trancount > 0 rollback;")
    try:
        expect_error(conn, f"set implicit_transactions on;\nexec {begin} @shard_id = 0;",
                     number=51071, text="IMPLICIT_TRANSACTIONS")  # fmt: skip
    finally:
        run(conn, "if @@trancount > 0 rollback;\nset implicit_transactions off;")
    assert feed.client.snapshots(conn) == []
    with pytest.raises(LockInTransaction, match="51071"):
        run(conn, "begin transaction;")
        try:
            feed.client.snapshot_begin(conn, 0)
        finally:
            run(conn, "if @@trancount > 0 rollback;")


def test_snapshot_finish_finishes_once(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_int")
    request = feed.client.snapshot_begin(conn, 0, key_from=[10], key_to=[20])
    assert (request.key_from, request.key_to) == ("[10]", "[20]")
    assert feed.client.snapshot_finish(conn, request.snapshot_id, 11) is True
    assert feed.client.snapshot_finish(conn, request.snapshot_id, 12) is False
    [done] = feed.client.snapshots(conn)
    assert done.rows_landed == 11 and done.finished_at is not None
    assert feed.client.snapshots(conn, pending_only=True) == []
    finish = feed.obj("snapshot_finish")
    with pytest.raises(InvalidArgument, match="no snapshot request 999"):
        feed.client.snapshot_finish(conn, 999, 0)
    known = f"@snapshot_id = {request.snapshot_id}"
    for args in ("@snapshot_id = null, @rows_landed = 0", f"{known}, @rows_landed = null",
                 f"{known}, @rows_landed = -1"):  # fmt: skip
        expect_error(conn, f"exec {finish} {args};", number=51070, text="needs @snapshot_id")
    again = f"declare @f bit; exec {finish} {known}, @rows_landed = 1, @finished = @f output;"
    assert scalar(conn, again + " select @f;") in (0, False)


def test_the_reader_requests_and_finishes_the_writer_may_not(
    mssql: Server, fresh: Any, conn: Any
) -> None:
    feed: LiveFeed = fresh("blocking_int")
    feed.client.info(conn)  # the registry entry, read as the admin
    with member_of(mssql, conn, feed.role("reader"), "cf_snapshot_reader") as c:
        request = feed.client.snapshot_begin(c, 0)
        assert feed.client.snapshots(c) == [request]
        assert feed.client.snapshot_finish(c, request.snapshot_id, 0) is True
        expect_error(c, f"delete from {feed.obj('snapshot')};", number=DENIED)
    with member_of(mssql, conn, feed.role("writer"), "cf_snapshot_writer") as c:
        expect_error(c, f"exec {feed.obj('snapshot_begin')} @shard_id = 0;", number=DENIED)
        expect_error(c, f"select * from {feed.obj('snapshot')};", number=DENIED)


def test_a_feed_registered_before_snapshots_gets_them_from_setup(fresh: Any, conn: Any) -> None:
    """Drop the snapshot objects and register the names without them: the client asks for
    upgrade_feed; setup says updated (not 51053), creates them and keeps the events."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    for kind in ("snapshot_begin", "snapshot_finish"):
        run(conn, f"drop procedure {feed.obj(kind)};")
    run(conn, f"drop table {feed.obj('snapshot')};")
    old = {k: v for k, v in feed.names.items() if k not in SNAPSHOT_KINDS}
    feeds = q(feed.spec["schema"]) + ".[feeds]"
    run(conn, f"update {feeds} set names = {lit(json.dumps(old, sort_keys=True))} "
              f"where feed_id = {lit(feed.spec['feed_id'])};")  # fmt: skip
    feed.client.refresh(conn)
    with pytest.raises(NeedsUpgrade, match="upgrade_feed"):
        feed.client.snapshot_begin(conn, 0)
    assert feed.client.snapshots(conn) == []
    assert feed.setup(conn) == "updated"
    assert feed.setup(conn) == "unchanged"
    feed.client.refresh(conn)
    request = feed.client.snapshot_begin(conn, 0)
    assert [e.key[0] for e in feed.read_all(conn, 0)] == [1]
    assert request.first_ulid > feed.read_all(conn, 0)[0].ulid
    # upgrade_feed does the same for a feed that lost them again
    run(conn, f"drop procedure {feed.obj('snapshot_finish')};")
    assert feed.upgrade(conn) == "upgraded"
    assert feed.client.snapshot_finish(conn, request.snapshot_id, 0) is True
