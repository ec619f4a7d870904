"""The ULID arithmetic under stress: clocks going backwards, the low half seeded at its
edges (set in the state row directly), and a million events in one transaction.

Each either stays in order (A1, checked by the history checker with concurrent writers
and readers) or fails with a clear error that leaves nothing behind.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.faults.checker import BLOCK_BITS, History, check
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import ReaderState, catch_up, read_page, record_write, write_once

from changefeed.client import InvalidArgument

pytestmark = pytest.mark.postgres

BLOCK = 1 << BLOCK_BITS
MAX_LOW_START = (1 << 63) - 1 - BLOCK  # the largest start whose block's next start fits
DAY_MS = 86_400_000


def ts_ms(ulid: bytes) -> int:
    return int.from_bytes(ulid[:6], "big")


def low(ulid: bytes) -> int:
    return int.from_bytes(ulid[8:], "big", signed=True)


def run_threads(targets: list[Any]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guard(fn: Any) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_clock_going_backwards_with_concurrent_writers(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any], mode: str
) -> None:
    kit = make_feed(mode, stall_timeout_ms=2000)
    history = History()
    now_ms = int(time.time() * 1000)
    offsets = [None, 0, -1000, -3_600_000, -DAY_MS, 2000, -now_ms]  # -now_ms: 1970-01-01
    invalid_ms = -1  # 1969-12-31T23:59:59.999: outside the ULID time range
    hints: dict[str, int | None] = {}
    refused: list[str] = []
    done = threading.Event()

    def writer(i: int) -> None:
        rng = random.Random(i)
        conn = connect()
        for n in range(15):
            keys = [i * 1000 + n * 10 + j for j in range(rng.randint(1, 3))]
            offset = rng.choice(offsets)
            hint = None if offset is None else now_ms + offset
            if n == 7:
                hint = invalid_ms
            write = record_write(kit, conn, history, 0, keys, time_hint_ms=hint)
            hints[write.wid] = hint
            if hint == invalid_ms:
                assert write.outcome == "failed", write
                refused.append(write.detail)
            else:
                assert write.outcome == "ok", write.detail

    reader = ReaderState("r")

    def read() -> None:
        rng = random.Random(99)
        conn = connect()
        while not done.is_set():
            read_page(kit, conn, history, reader, 0, rng.randint(1, 10))
        catch_up(kit, conn, history, reader, [0])

    def writers_then_stop_reading() -> None:
        try:
            errors = run_threads([lambda i=i: writer(i) for i in range(3)])
            if errors:
                raise errors[0]
        finally:
            done.set()

    errors = run_threads([writers_then_stop_reading, read])
    assert not errors, errors
    final = kit.final(admin)
    check(history, final)
    # A refused hint is refused clearly, by the server, and leaves nothing behind.
    assert len(refused) == 3
    for detail in refused:
        if mode == "blocking":
            assert detail.startswith(InvalidArgument.__name__), detail
            assert "outside the ULID time range" in detail
        else:  # the outbox's check constraint on time_hint
            assert "23514" in detail, detail
    # The feed's time never goes backwards, and never below a write's own hint.
    times = [ts_ms(u) for u, _ in final[0]]
    assert times == sorted(times)
    at = {k: ts_ms(u) for u, k in final[0]}
    for wid, write in history.writes.items():
        hint = hints.get(wid)
        if write.outcome == "ok" and hint is not None:
            assert all(at[k] >= hint for k in write.keys)
    assert reader.seen[0] == final[0]


# (seeded ulid_low, whether the first write must move to a fresh millisecond)
EDGES = [
    (2**62 - BLOCK, False),  # just below bit 62: plenty of headroom, continue
    (2**62, False),
    (MAX_LOW_START - MAX_LOW_START % BLOCK, False),  # the last block whose next start fits
    (MAX_LOW_START - MAX_LOW_START % BLOCK + BLOCK, True),  # its next start would overflow
    (-BLOCK, False),  # ends at -1: fine; but the write after it must jump
    (0, True),  # continuing from 0 would sort below a block that ended at -1
    (-(2**62), False),
    (-(2**63) + BLOCK, False),  # the smallest reachable next-free start (after -2^63's block)
]


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_low_half_seeded_at_its_edges(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any], mode: str
) -> None:
    """Each shard's state row is set to one edge, in a millisecond 10 minutes ahead (so
    every write continues it); two writers per shard and a reader then run together."""
    kit = make_feed(mode, stall_timeout_ms=2000)
    history = History()
    seeded_ms = int(time.time() * 1000) + 600_000
    high = seeded_ms.to_bytes(6, "big") + b"\x12\x34"
    shards = list(range(len(EDGES)))
    for shard, (edge, _) in zip(shards, EDGES, strict=True):
        admin.execute(
            sql.SQL(
                "insert into {} (shard_id, time_ms, ulid_high, ulid_low, generation) "
                "values (%s, %s, %s, %s, 0)"
            ).format(kit.q("state")),
            [shard, seeded_ms, high, edge],
        )
    heads = {s: kit.safe_point(admin, s)[1] for s in shards}

    def writer(i: int) -> None:
        conn = connect()
        for n in range(3):
            for shard in shards:
                keys = [shard * 100_000 + i * 1000 + n * 10 + j for j in range(2)]
                assert write_once(kit, conn, history, shard, keys)

    reader = ReaderState("r")

    def read() -> None:
        conn = connect()
        rng = random.Random(3)
        for _ in range(60):
            read_page(kit, conn, history, reader, rng.choice(shards), rng.randint(1, 5))

    errors = run_threads([lambda: writer(0), lambda: writer(1), read])
    assert not errors, errors
    catch_up(kit, connect(), history, reader, shards)
    final = kit.final(admin)
    check(history, final)
    for shard, (edge, jumps) in zip(shards, EDGES, strict=True):
        events = final[shard]
        assert len(events) == 12
        first = events[0][0]
        assert first > heads[shard]
        if jumps:
            assert ts_ms(first) == seeded_ms + 1, (edge, first.hex())
        else:
            # The same block as the seeded start (in blocking mode the offset in it may be
            # above 0: writers of other shards take numbers from the same sequence).
            assert first[:8] == high and low(first) >> BLOCK_BITS == edge >> BLOCK_BITS, (
                edge,
                first.hex(),
            )
        assert all(seeded_ms <= ts_ms(u) <= seeded_ms + 12 for u, _ in events)
        assert reader.seen[shard] == events


@pytest.mark.slow
def test_a_million_outbox_rows_in_one_transaction(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any]
) -> None:
    """A2 + O2 in outbox mode: one source transaction of 10^6 rows, written while other
    writers commit small transactions, is moved whole into one block and read as one
    page (a transaction larger than the page comes whole)."""
    kit = make_feed("outbox", stall_timeout_ms=30_000)
    history = History()
    big_conn, small_conn, mconn = connect(), connect(), connect()
    stop = threading.Event()

    def small() -> None:
        n = 0
        while not stop.is_set():
            assert write_once(kit, small_conn, history, 0, [2_000_000 + n])
            n += 1
            time.sleep(0.01)

    def mover() -> None:
        while not stop.is_set():
            kit.move_outbox(mconn, 0, 1000)
            time.sleep(0.05)

    def big() -> None:
        try:
            with big_conn.transaction():
                big_conn.execute(
                    sql.SQL(
                        "insert into {} (shard_id, id) select 0, g "
                        "from generate_series(1, 1000000) as g order by g"
                    ).format(kit.q("outbox"))
                )
        finally:
            stop.set()

    errors = run_threads([small, mover, big])
    assert not errors, errors
    write = history.begin_write(0, range(1, 1_000_001), wid="big")
    history.end_write(write, "ok")
    kit.final(admin)  # moves the rest: the big transaction whole
    feed = kit.q("feed")
    row = admin.execute(
        sql.SQL(
            "select count(*), count(distinct substr(ulid, 1, 8)), "
            "count(distinct ('x' || encode(substr(ulid, 9, 8), 'hex'))::bit(64)::bigint >> 36), "
            "(select ulid from {f} where id <= 1000000 order by shard_id, ulid limit 1), "
            "(select ulid from {f} where id <= 1000000 order by shard_id desc, ulid desc limit 1) "
            "from {f} where id <= 1000000"
        ).format(f=feed)
    ).fetchone()
    assert row is not None
    count, highs, blocks, lo, hi = row
    assert (count, highs, blocks) == (1_000_000, 1, 1)
    assert low(bytes(hi)) - low(bytes(lo)) == 999_999
    in_order = admin.execute(
        sql.SQL(
            "select bool_and(id = prev + 1) from (select id, lag(id) over (order by ulid) "
            "as prev from {} where id <= 1000000) s where prev is not null"
        ).format(feed)
    ).fetchone()
    assert in_order == (True,)
    inside = admin.execute(
        sql.SQL("select count(*) from {} where id > 1000000 and ulid between %s and %s").format(
            feed
        ),
        [lo, hi],
    ).fetchone()
    assert inside == (0,), "a small transaction inside the big one's block"
    before = admin.execute(
        sql.SQL(
            "select coalesce((select ulid from {} where ulid < %s order by ulid desc limit 1), %s)"
        ).format(feed),
        [lo, bytes(16)],
    ).fetchone()
    assert before is not None
    page = admin.execute(
        sql.SQL(
            "select count(*), sum((ulid = %s)::int), sum((ulid = %s)::int) from {}(0, %s, 10)"
        ).format(kit.q("read_feed")),
        [lo, hi, before[0]],
    ).fetchone()
    assert page == (1_000_000, 1, 1), page  # the whole transaction, from lo to hi
    smalls = admin.execute(
        sql.SQL("select ulid, id from {} where id > 1000000 order by ulid").format(feed)
    ).fetchall()
    assert len(smalls) == history.count("ok") - 1 > 0
    # The small writes (and their order) pass the checker; the big one is checked above.
    small_history = History()
    small_history.writes = {k: w for k, w in history.writes.items() if k != "big"}
    check(small_history, {0: [(bytes(u), k) for u, k in smalls]})
