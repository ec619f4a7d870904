"""Outbox mode on a real SQL Server (protocol sections 5 and 8), ported from
mssql-changefeed's happy-day and load tests with exact assertions, plus whole source
transactions per block and late commits (O2, O3)."""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from typing import Any

from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    Server,
    Threads,
    block_of,
    epoch_ms,
    low,
    ms,
    run,
)

from changefeed.client import Event


def test_happy_day(fresh: Any, conn: Any) -> None:
    """Out-of-order time hints become a running maximum, paging works, and a re-read
    from zero returns the same events in the same order."""
    feed: LiveFeed = fresh("outbox_int")
    noon = dt.datetime(2023, 5, 31, 12, 0)
    # order_id = aggregate * 10 + version; inserted in aggregate-version order, each in
    # its own transaction, with time hints that go backwards
    inserts = [(10001, 0), (10011, 3), (10002, 2), (10012, 1), (10003, 10)]
    for order_id, minute in inserts:
        feed.outbox_insert(conn, 0, [[order_id]], noon + dt.timedelta(minutes=minute))

    page1 = feed.client.read_page(conn, 0, bytes(16), page_size=3).events
    assert [r.key[0] for r in page1] == [10001, 10011, 10002]
    minutes = [epoch_ms(noon + dt.timedelta(minutes=m)) for m in (0, 3, 3)]
    assert [ms(r.ulid) for r in page1] == minutes  # 12:02 came after 12:03: kept at 12:03
    page2 = feed.client.read_page(conn, 0, page1[-1].ulid, page_size=100).events
    assert [r.key[0] for r in page2] == [10012, 10003]
    assert [ms(r.ulid) for r in page2] == [
        epoch_ms(noon + dt.timedelta(minutes=m)) for m in (3, 10)
    ]

    # every source transaction its own block; the 12:03 ones continue one high
    u = [r.ulid for r in page1 + page2]
    assert len({block_of(x) for x in u}) == 5
    assert u[1][:8] == u[2][:8] == u[3][:8]
    assert (low(u[2]), low(u[3])) == (low(u[1]) + BLOCK, low(u[1]) + 2 * BLOCK)
    # ULIDs built from time hints keep their two random bytes (mssql-changefeed lost them)
    fresh_highs = {u[0][:8], u[1][:8], u[4][:8]}
    assert len(fresh_highs) == 3 and {h[6:8] for h in fresh_highs} != {b"\x00\x00"}

    assert feed.count(conn, "outbox") == 0 and feed.count(conn, "feed") == 5
    again = feed.client.read_page(conn, 0, bytes(16), page_size=100)
    assert again.events == page1 + page2


def test_a_source_transaction_is_one_block_and_never_split(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_int")
    feed.outbox_insert(conn, 0, [[1], [2], [3], [4], [5]])  # A: larger than a page
    feed.outbox_insert(conn, 0, [[6]])  # B
    feed.outbox_insert(conn, 0, [[7], [8]])  # C
    pages = []
    cursor = bytes(16)
    while (page := feed.client.read_page(conn, 0, cursor, page_size=2)).events:
        pages.append([r.key[0] for r in page.events])
        cursor = page.cursor
    # A, larger than a page, comes whole; the mover takes B but not C, which would make
    # its batch larger than the page; C then fills a page exactly.
    assert pages == [[1, 2, 3, 4, 5], [6], [7, 8]]
    blocks = [block_of(r.ulid) for r in feed.read_all(conn, 0)]
    assert len(set(blocks[:5])) == 1 and len(set(blocks[6:])) == 1 and len(set(blocks)) == 3


def test_a_late_commit_is_not_skipped(fresh: Any, mssql: Server, conn: Any) -> None:
    """O3: a row committed after a row with a later order_sequence was moved still gets a
    ULID above the head; and readers skip (not wait for) uncommitted outbox rows."""
    feed: LiveFeed = fresh("outbox_int")
    with mssql.connection() as late, mssql.connection(timeout=20) as reader:
        run(
            late,
            "begin transaction;\n"
            f"insert into {feed.obj('outbox')} (shard_id, {feed.keys_sql}) values (0, 1);",
        )
        feed.outbox_insert(conn, 0, [[2]])
        started = time.monotonic()
        first = feed.client.read_page(reader, 0)
        assert time.monotonic() - started < 10
        assert [r.key[0] for r in first.events] == [2]
        run(late, "commit;")
        second = feed.client.read_page(reader, 0, first.cursor)
        assert [r.key[0] for r in second.events] == [1]
        assert second.events[0].ulid > first.cursor


def test_concurrent_writers_and_racing_first_readers(fresh: Any, mssql: Server, conn: Any) -> None:
    """8 writers, each 40 transactions of 1-3 outbox rows with jittered time hints, while
    4 readers race to be the first to move the outbox. All readers see the same events
    once each, each writer's in order, each transaction contiguous in one block."""
    feed: LiveFeed = fresh("outbox_composite")
    writers, transactions = 8, 40
    tenants = [uuid.uuid4() for _ in range(writers)]
    total = writers * sum(1 + j % 3 for j in range(transactions))

    def write(w: int) -> None:
        rng = random.Random(w)
        version = 0
        with mssql.connection() as c:
            for j in range(transactions):
                rows = []
                for _ in range(1 + j % 3):
                    rows.append([tenants[w], f"tx{j}", version])
                    version += 1
                now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
                hint = now - dt.timedelta(milliseconds=rng.randint(0, 2000))
                feed.outbox_insert(c, 0, rows, hint)

    seen: list[list[Event]] = []

    def read() -> None:
        out: list[Event] = []
        cursor = bytes(16)
        deadline = time.monotonic() + 240
        with mssql.connection() as c:
            while len(out) < total:
                assert time.monotonic() < deadline, f"a reader saw {len(out)} of {total}"
                page = feed.client.read_page(c, 0, cursor, page_size=7)
                if not page.events:
                    time.sleep(0.01)
                    continue
                out += page.events
                cursor = page.cursor
        seen.append(out)

    threads = Threads()
    for w in range(writers):
        threads.start(write, w)
    for _ in range(4):
        threads.start(read)
    threads.join(300)

    full = feed.read_all(conn, 0)
    assert len(full) == total and all(s == full for s in seen)
    assert feed.count(conn, "outbox") == 0
    ulids = [r.ulid for r in full]
    assert ulids == sorted(ulids) and len(set(ulids)) == total
    assert [ms(u) for u in ulids] == sorted(ms(u) for u in ulids)  # the running maximum
    per_writer: dict[Any, list[int]] = {}
    where: dict[tuple[Any, str], list[int]] = {}
    for position, (tenant, sku, version) in enumerate(e.key for e in full):
        per_writer.setdefault(tenant, []).append(version)
        where.setdefault((tenant, sku), []).append(position)
    for versions in per_writer.values():
        assert versions == list(range(len(versions)))
    for positions in where.values():
        assert positions == list(range(positions[0], positions[0] + len(positions)))
        assert len({block_of(full[p].ulid) for p in positions}) == 1
    assert len({block_of(u) for u in ulids}) == len(where)


def test_interleaved_transactions_are_moved_in_order_of_their_last_row(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """O8: a's first outbox row comes before b's rows and its last after them; with a page
    of one row the mover widens its window until a transaction lies wholly in it, and
    moves b first, then a."""
    feed: LiveFeed = fresh("outbox_int")
    insert = f"insert into {feed.obj('outbox')} (shard_id, {feed.keys_sql}) values (0, "
    with mssql.connection() as a:
        run(a, f"begin transaction; {insert}1);")
        feed.outbox_insert(conn, 0, [[2], [3]])
        run(a, f"{insert}4); commit;")
    first = feed.client.read_page(conn, 0, page_size=1)
    assert [e.key[0] for e in first.events] == [2, 3], "b whole, before a"
    rest = feed.read_all(conn, 0, first.cursor)
    assert [e.key[0] for e in rest] == [1, 4]
