"""Blocking mode on a real SQL Server (protocol sections 3 and 4), ported from
mssql-changefeed's own tests with exact assertions, plus the range guard.

mssql-changefeed's happy-day test calls the lock four times inside ONE transaction. Here
the lock must run outside any transaction (it commits the pending session, protocol
4.3), so the same assertions are made over consecutive writes: one time hint keeps
ulid_high and steps ulid_low by exactly one block (2^36), a later time gets a new high.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
import uuid
from typing import Any

import pytest
from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    Server,
    Threads,
    block_of,
    epoch_ms,
    expect_error,
    lit,
    low,
    ms,
    run,
    scalar,
)

from changefeed.client import Event, WriteTransactionBroken


def _ulid(high: bytes, low_: int) -> bytes:
    return high + low_.to_bytes(8, "big", signed=True)


def test_happy_day(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    hint = dt.datetime(2023, 9, 30)
    w1 = feed.write(conn, 0, [[1], [2]], hint)
    w2 = feed.write(conn, 0, [[3]], hint)
    w3 = feed.write(conn, 0, [[4]], hint)
    w4 = feed.write(conn, 0, [[5]])  # the time now
    rows = feed.read_all(conn, 0)
    assert [r.key[0] for r in rows] == [1, 2, 3, 4, 5]
    u = {r.key[0]: r.ulid for r in rows}

    # one time hint: the same ulid_high, and each write exactly one block further
    assert u[1][:8] == u[2][:8] == u[3][:8] == u[4][:8] == w1.ulid_high
    assert low(u[2]) == low(u[1]) + 1
    assert low(u[3]) == low(u[1]) + BLOCK
    assert low(u[4]) == low(u[1]) + 2 * BLOCK
    assert (w1.block_start, w2.block_start, w3.block_start) == (low(u[1]), low(u[3]), low(u[4]))
    assert ms(u[1]) == epoch_ms(hint)
    # a fresh block: aligned to 2^36, bit 62 clear
    assert w1.block_start % BLOCK == 0 and not w1.block_start & (1 << 62)
    # a later time: a new ulid_high, above
    assert ms(u[5]) > ms(u[1]) and u[5] > u[4] and u[5][:8] == w4.ulid_high

    # the state and the safe point: the end of the last block
    state = feed.state(conn, 0)
    assert state is not None and state["ulid_low"] == w4.block_start + BLOCK
    head = _ulid(w4.ulid_high, w4.block_start + BLOCK - 1)
    assert bytes(state["head"]) == head
    sp = feed.client.safe_point(conn, 0)
    assert (sp.safe_point, sp.head, sp.pending) == (head, head, 0)


def test_several_statements_in_one_write_never_overlap(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    w = feed.lock(conn, 0, dt.datetime(2024, 1, 1))
    run(conn, "begin transaction;\n" + feed.insert_events_sql(0, [[10]]))
    run(conn, feed.insert_events_sql(0, [[11], [12]]))
    run(conn, feed.publish_sql())
    rows = feed.read_all(conn, 0)
    assert [r.key[0] for r in rows] == [10, 11, 12]
    assert [low(r.ulid) for r in rows] == [w.block_start, w.block_start + 1, w.block_start + 2]
    assert {block_of(r.ulid) for r in rows} == {(w.ulid_high, w.block_start >> 36)}


def test_a_body_transaction_nests_in_the_write(fresh: Any, conn: Any) -> None:
    """A body's own ``begin transaction`` ... ``commit`` nests in the write's: an exception
    after it leaves neither its row nor its event, and a balanced one publishes once. A body
    that leaves ``@@trancount`` at 2 (its own ``begin transaction`` open) or at 0 (a
    ``commit`` of the write's transaction) is refused by the publish batch (51072), rolled
    back and released; what that ``commit`` committed stays."""
    feed: LiveFeed = fresh("blocking_int")
    insert = "insert into [shop].[orders] (order_id) values ({});"
    with pytest.raises(RuntimeError, match="after"), feed.client.write(conn, 0) as w:
        run(conn, f"begin transaction;\n{insert.format(1)}\ncommit;")
        w.insert_events([(1,)])
        raise RuntimeError("after the body's transaction")
    with feed.client.write(conn, 0) as w:
        run(conn, f"begin transaction;\n{insert.format(2)}\ncommit;")
        w.insert_events([(2,)])
        conn.commit()  # pymssql on an autocommit connection: nothing is sent
    left_open = pytest.raises(WriteTransactionBroken, match="nesting level 2")
    with left_open, feed.client.write(conn, 0) as w:
        run(conn, f"begin transaction;\n{insert.format(3)}")
        w.insert_events([(3,)])
    assert scalar(conn, "select @@trancount;") == 0
    ended = pytest.raises(WriteTransactionBroken, match="nesting level 0")
    with ended, feed.client.write(conn, 0) as w:
        run(conn, insert.format(4))
        w.insert_events([(4,)])
        run(conn, "commit;")
    feed.write(conn, 0, [[5]])  # each refused write was released
    assert [r[0] for r in run(conn, "select order_id from [shop].[orders] order by 1;")] == [2, 4]
    # The body's commit committed row 4 with its event; the released write holds back nothing.
    assert [e.key[0] for e in feed.read_all(conn, 0)] == [2, 4, 5]


def test_misuse_fails_clearly(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    lock_call = f"exec {feed.obj('lock')} @shard_id = 0;"
    update_state = f"exec {feed.obj('update_state')};"
    expect_error(conn, "begin transaction;\n" + lock_call, number=51001, text="outside any")
    run(conn, "if @@trancount > 0 rollback;")
    expect_error(conn, update_state, number=51010, text="no write in progress")
    expect_error(
        conn, f"select {feed.obj('ulid')}(1);", text="no write in progress on this connection"
    )
    feed.lock(conn, 0)
    expect_error(conn, update_state, number=51011, text="inside the writer's transaction")
    expect_error(conn, lock_call, number=51006, text="is already open on this connection")
    feed.client.release(conn)
    feed.lock(conn, 0)  # after release, the next write may start
    feed.client.release(conn)
    expect_error(conn, f"select {feed.obj('ulid')}(1);", text="no write in progress")
    expect_error(
        conn,
        f"exec {feed.obj('lock')} @shard_id = 0, @time_hint = '1969-12-31';",
        number=51004,
        text="before 1970-01-01",
    )


def test_range_guard(fresh: Any, conn: Any) -> None:
    """ulid(v) with i = v - seq_start - 1 outside [0, 2^36) raises; mssql-changefeed
    silently overlapped the next transaction's range from i = 10^11."""
    feed: LiveFeed = fresh("blocking_int")
    w = feed.lock(conn, 0, dt.datetime(2024, 1, 1))
    seq_start = int(
        scalar(
            conn,
            "select convert(bigint, current_value) from sys.sequences "
            f"where object_id = object_id({lit(feed.obj('sequence'))});",
        )
    )
    ulid = feed.obj("ulid")
    assert bytes(scalar(conn, f"select {ulid}({seq_start + 1});")) == _ulid(
        w.ulid_high, w.block_start
    )
    last = bytes(scalar(conn, f"select {ulid}({seq_start + BLOCK});"))
    assert last == _ulid(w.ulid_high, w.block_start + BLOCK - 1)
    for v, i in [
        (seq_start + BLOCK + 1, BLOCK),
        (seq_start, -1),
        (seq_start + 1 + 10**11, 10**11),
    ]:
        expect_error(
            conn,
            f"select {ulid}({v});",
            text=f"changefeed: ulid offset {i} is outside this transaction's block [0, 2^36)",
        )
    feed.client.release(conn)


def test_fresh_blocks_have_random_bytes_after_the_time(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    highs = [
        feed.write(conn, 0, [[i]], dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i)).ulid_high
        for i in range(8)
    ]
    assert len({h[6:8] for h in highs}) > 1
    assert [int.from_bytes(h[:6], "big") for h in highs] == [
        epoch_ms(dt.datetime(2024, 1, 1)) + i for i in range(8)
    ]


def test_concurrent_writers_and_readers(fresh: Any, mssql: Server, conn: Any) -> None:
    """6 writers on 2 shards, each 15 transactions of 1-3 events, while 2 readers per
    shard page through the feed. Every reader sees every event exactly once, each
    writer's events in order, each transaction contiguous in one block, and no page
    splits a transaction."""
    feed: LiveFeed = fresh("blocking_composite")
    writers, transactions = 6, 15
    tenants = [uuid.uuid4() for _ in range(writers)]
    expected = {0: 0, 1: 0}
    for w in range(writers):
        expected[w % 2] += sum(1 + j % 3 for j in range(transactions))

    def write(w: int) -> None:
        with mssql.connection() as c:
            version = 0
            for j in range(transactions):
                rows = []
                for _ in range(1 + j % 3):
                    rows.append([tenants[w], f"tx{j}", version])
                    version += 1
                feed.write(c, w % 2, rows)

    pages: dict[int, list[list[list[Event]]]] = {0: [], 1: []}

    def read(shard: int) -> None:
        seen: list[list[Event]] = []
        cursor = bytes(16)
        count = 0
        deadline = time.monotonic() + 240
        with mssql.connection() as c:
            while count < expected[shard]:
                assert time.monotonic() < deadline, f"reader of shard {shard} saw {count} events"
                page = feed.client.read_page(c, shard, cursor, 5)
                if not page.events:
                    time.sleep(0.01)
                    continue
                seen.append(page.events)
                count += len(page.events)
                cursor = page.cursor
        pages[shard].append(seen)

    threads = Threads()
    for w in range(writers):
        threads.start(write, w)
    for shard in (0, 1, 0, 1):
        threads.start(read, shard)
    threads.join(300)

    for shard in (0, 1):
        full = feed.read_all(conn, shard)
        assert len(full) == expected[shard]
        ulids = [r.ulid for r in full]
        assert ulids == sorted(ulids) and len(set(ulids)) == len(ulids)
        for reader_pages in pages[shard]:
            assert [r for page in reader_pages for r in page] == full
            blocks = [{block_of(r.ulid) for r in page} for page in reader_pages]
            for a, b in itertools.pairwise(blocks):
                assert not a & b, "a page split a transaction"
        by_tx: dict[tuple[Any, str], list[int]] = {}
        positions: dict[tuple[Any, str], list[int]] = {}
        per_writer: dict[Any, list[int]] = {}
        for position, (ulid, (tenant, sku, version)) in enumerate((e.ulid, e.key) for e in full):
            by_tx.setdefault((tenant, sku), []).append(hash(block_of(ulid)))
            positions.setdefault((tenant, sku), []).append(position)
            per_writer.setdefault(tenant, []).append(version)
        for versions in per_writer.values():
            assert versions == list(range(len(versions)))
        for tx, where in positions.items():
            assert where == list(range(where[0], where[0] + len(where))), tx
            assert len(set(by_tx[tx])) == 1, tx
        assert len({b for bs in by_tx.values() for b in bs}) == len(by_tx)
        sp = feed.client.safe_point(conn, shard)
        assert (
            sp.safe_point
            == sp.head
            == ulids[-1][:8]
            + ((low(ulids[-1]) >> 36 << 36) + BLOCK - 1).to_bytes(8, "big", signed=True)
        )
