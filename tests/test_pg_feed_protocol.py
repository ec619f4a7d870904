"""The protocol (docs/protocol.md) on a real PostgreSQL 16 server: blocks, the stall-proof
lock, the outbox mover, sessions and safe points, pages, barriers and the error codes.

Feeds are set up once per module with ``dbt run-operation changefeed.setup_feed``; each
test uses its own shards. Writes go through :mod:`changefeed.client`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from tests.support.pg_feeds import (
    BLOCK,
    block_of,
    connect,
    create_table,
    q,
    registry_row,
    setup_feed,
    teardown_feed,
    ulid_low,
    ulid_time_ms,
)

from changefeed.client import (
    ZERO_ULID,
    InvalidArgument,
    LockInTransaction,
    PostgresFeed,
    UlidRangeError,
    WriteAbandoned,
    WriteTransactionBroken,
    WrongMode,
)

pytestmark = pytest.mark.postgres

T0 = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
T0_MS = int(T0.timestamp() * 1000)
MAX_LOW_START = 2**63 - 1 - BLOCK


@pytest.fixture(scope="module")
def feeds(dbt: Any, admin: psycopg.Connection[Any]) -> dict[str, dict[str, str]]:
    """blocking (default options), stall (400 ms stall timeout) and outbox feeds."""
    create_table(admin, "cf_proto", "orders", "order_id bigint primary key")
    create_table(admin, "cf_proto", "stall", "order_id bigint primary key")
    create_table(admin, "cf_proto", "items", "region int, sku text, primary key (region, sku)")
    for table in ("orders", "stall", "items"):
        teardown_feed(dbt, "cf_proto", table)
    setup_feed(dbt, "cf_proto", "orders", "blocking")
    setup_feed(dbt, "cf_proto", "stall", "blocking", stall_timeout_ms=400, lock_probe_ms=20)
    setup_feed(dbt, "cf_proto", "items", "outbox")
    names: dict[str, dict[str, str]] = {}
    for table in ("orders", "stall", "items"):
        row = registry_row(admin, f"cf_proto.{table}")
        assert row is not None
        names[table] = dict(row["names"])
    return names


@pytest.fixture
def conn(pg_uri: str, feeds: dict[str, dict[str, str]]) -> Iterator[psycopg.Connection[Any]]:
    c = connect(pg_uri)
    yield c
    c.close()


ORDERS = PostgresFeed("cf_proto.orders")
STALL = PostgresFeed("cf_proto.stall")
ITEMS = PostgresFeed("cf_proto.items")


def _events(conn: psycopg.Connection[Any], feed: PostgresFeed, shard: int) -> list[Any]:
    """Every event of the shard, paging through read_feed."""
    out: list[Any] = []
    cursor = ZERO_ULID
    while True:
        page = feed.read_page(conn, shard, cursor, page_size=5000)
        if not page.events:
            return out
        out.extend(page.events)
        cursor = page.cursor


def _state(admin: psycopg.Connection[Any], names: dict[str, str], shard: int) -> tuple[Any, ...]:
    row = admin.execute(
        f"select time_ms, ulid_high, ulid_low, generation from {q(names['state'])} "
        "where shard_id = %s",
        (shard,),
    ).fetchone()
    assert row is not None
    return tuple(row)


# -- blocking mode: blocks --------------------------------------------------------------------


def test_same_millisecond_writes_step_the_low_half_by_one_block(
    feeds: dict[str, dict[str, str]], conn: psycopg.Connection[Any], admin: psycopg.Connection[Any]
) -> None:
    writes = []
    for i in range(4):
        with ORDERS.write(conn, 10, time_hint=T0) as w:
            w.insert_events([(i,), (100 + i,)])
            writes.append((w.ulid_high, w.block_start, w.write_id))
    highs = {h for h, _, _ in writes}
    assert len(highs) == 1, "the same time hint keeps ulid_high"
    high = highs.pop()
    assert int.from_bytes(high[:6], "big") == T0_MS
    starts = [s for _, s, _ in writes]
    assert [b - a for a, b in itertools.pairwise(starts)] == [BLOCK] * 3
    # A fresh block: aligned, and bit 62 cleared (2^62 of headroom, whatever the sign).
    assert starts[0] % BLOCK == 0 and (starts[0] >> 62) & 1 == 0
    events = _events(conn, ORDERS, 10)
    assert [e.key[0] for e in events] == [0, 100, 1, 101, 2, 102, 3, 103]
    ulids = [e.ulid for e in events]
    assert ulids == sorted(ulids) and len(set(ulids)) == 8
    # Within a write the events are consecutive ULIDs of its block.
    assert [ulid_low(u) for u in ulids[:2]] == [starts[0], starts[0] + 1]
    assert _state(admin, feeds["orders"], 10)[:3] == (T0_MS, high, starts[-1] + BLOCK)


def test_several_statements_of_one_write_never_overlap(conn: psycopg.Connection[Any]) -> None:
    with ORDERS.write(conn, 11) as w:
        table = w.feed_table
        for start in (0, 10, 20):
            conn.execute(
                f"insert into {table} (shard_id, ulid, order_id) "
                f"select %s, {w.ulid_sql}, g from generate_series(%s::bigint, %s) as g order by g",
                (11, start, start + 4),
            )
        first = w.first_ulid
    events = _events(conn, ORDERS, 11)
    assert [e.key[0] for e in events] == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24]
    assert events[0].ulid == first
    assert len({block_of(e.ulid) for e in events}) == 1


def test_a_clock_going_backwards_never_goes_backwards_in_the_feed(
    feeds: dict[str, dict[str, str]], conn: psycopg.Connection[Any], admin: psycopg.Connection[Any]
) -> None:
    with ORDERS.write(conn, 12, time_hint=T0 + timedelta(hours=1)) as w:
        w.insert_events([(1,)])
    with ORDERS.write(conn, 12, time_hint=T0) as w2:
        w2.insert_events([(2,)])
    events = _events(conn, ORDERS, 12)
    assert [ulid_time_ms(e.ulid) for e in events] == [T0_MS + 3_600_000] * 2
    assert events[0].ulid < events[1].ulid
    assert w2.block_start == w.block_start + BLOCK
    assert _state(admin, feeds["orders"], 12)[0] == T0_MS + 3_600_000


@pytest.mark.parametrize(
    ("shard", "seeded_low", "jumps"),
    [
        (20, 2**62, False),  # near 2^62: plenty of headroom left, continue in the same ms
        (21, MAX_LOW_START - MAX_LOW_START % BLOCK, False),  # the last block whose next start fits
        (22, MAX_LOW_START - MAX_LOW_START % BLOCK + BLOCK, True),  # its next start would overflow
        (23, 0, True),  # continuing after a block that ended at -1 would sort below it
        (24, -BLOCK, False),  # the block ending at -1 is fine; continuing after it is not
    ],
)
def test_headroom_rule_keeps_the_feed_ordered(
    feeds: dict[str, dict[str, str]],
    conn: psycopg.Connection[Any],
    admin: psycopg.Connection[Any],
    shard: int,
    seeded_low: int,
    jumps: bool,
) -> None:
    names = feeds["orders"]
    admin.execute(f"delete from {q(names['feed'])} where shard_id = %s", (shard,))
    admin.execute(f"delete from {q(names['state'])} where shard_id = %s", (shard,))
    high = T0_MS.to_bytes(6, "big") + b"\x12\x34"
    admin.execute(
        f"insert into {q(names['state'])} values (%s, %s, %s, %s, 0)",
        (shard, T0_MS, high, seeded_low),
    )
    head_before = ORDERS.safe_point(conn, shard).head
    assert head_before == high + (seeded_low - 1).to_bytes(8, "big", signed=True)
    ulids = []
    for i in range(3):
        with ORDERS.write(conn, shard, time_hint=T0) as w:
            w.insert_events([(i,), (i + 10,)])
        ulids.extend(e.ulid for e in _events(conn, ORDERS, shard)[-2:])
    assert ulids == sorted(ulids) and len(set(ulids)) == 6
    assert all(u > head_before for u in ulids)
    first_time = ulid_time_ms(ulids[0])
    if jumps:
        assert first_time == T0_MS + 1, "a fresh block one millisecond later"
    else:
        assert first_time == T0_MS and ulid_low(ulids[0]) == seeded_low
        assert ulids[0][:8] == high
    if seeded_low == -BLOCK:
        # The next write would continue from 0, so it moves to a fresh millisecond.
        assert ulid_time_ms(ulids[2]) == T0_MS + 1


def test_range_guard(conn: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]) -> None:
    ulid_fn = q(feeds["orders"]["ulid"])
    with ORDERS.write(conn, 13) as w:
        seq_start = w.write_id
        last = conn.execute(f"select {ulid_fn}(%s)", (seq_start + BLOCK,)).fetchone()
        assert last is not None and ulid_low(bytes(last[0])) == w.block_start + BLOCK - 1
        for bad in (seq_start, seq_start + BLOCK + 1):
            with pytest.raises(psycopg.Error) as exc_info, conn.transaction():
                conn.execute(f"select {ulid_fn}(%s)", (bad,))
            assert exc_info.value.sqlstate == "CF003"
            assert "outside this transaction's block [0, 2^36)" in str(exc_info.value)
        w.insert_events([(1,)])
    with pytest.raises(UlidRangeError), ORDERS.write(conn, 13) as w:
        conn.execute(f"select {ulid_fn}(%s)", (w.write_id - 5,))


def test_a_million_ulids_in_one_transaction(conn: psycopg.Connection[Any]) -> None:
    with ORDERS.write(conn, 14) as w:
        conn.execute(
            f"insert into {w.feed_table} (shard_id, ulid, order_id) "
            f"select 14, {w.ulid_sql}, g from generate_series(1, 1000000) as g order by g"
        )
        first = w.first_ulid
    table = w.feed_table
    row = conn.execute(
        f"select count(*), count(distinct ulid), bool_and(substr(ulid, 1, 8) = %s), "
        f"(select ulid from {table} where shard_id = 14 order by ulid limit 1), "
        f"(select ulid from {table} where shard_id = 14 order by ulid desc limit 1) "
        f"from {table} where shard_id = 14",
        (first[:8],),
    ).fetchone()
    assert row is not None
    count, distinct, same_high, lo, hi = row
    assert (count, distinct, same_high) == (1_000_000, 1_000_000, True)
    assert bytes(lo) == first and ulid_low(bytes(hi)) - ulid_low(first) == 999_999
    ordered = conn.execute(
        f"select bool_and(k = prev + 1) from (select order_id as k, lag(order_id) over "
        f"(order by ulid) as prev from {w.feed_table} where shard_id = 14) s where prev is not null"
    ).fetchone()
    assert ordered == (True,), "ULID order follows the generate_series order"


# -- blocking mode: errors and releasing ---------------------------------------------------------


def test_sqlstates_of_misuse(
    conn: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    n = feeds["orders"]
    with pytest.raises(psycopg.Error) as e1:
        conn.execute(f"select {q(n['ulid'])}(1)")
    assert e1.value.sqlstate == "CF004"
    with pytest.raises(psycopg.Error) as e2:
        conn.execute(f"select {q(n['update_state'])}()")
    assert e2.value.sqlstate == "CF004"
    with pytest.raises(psycopg.Error) as e3, conn.transaction():
        conn.execute(f"call {q(n['lock'])}(15)")
    assert e3.value.sqlstate == "CF005"
    assert "called inside a transaction block" in str(e3.value)
    # The internal function, called directly in a transaction that already wrote:
    with pytest.raises(psycopg.Error) as e4, conn.transaction():
        conn.execute("create temp table cf_x as select 1")  # an xid is assigned
        conn.execute(f"select * from {q(n['lock_wait'])}(15, null)")
    assert e4.value.sqlstate == "CF005"
    conn.execute(f"call {q(n['lock'])}(15)")
    with pytest.raises(psycopg.Error) as e5:
        conn.execute(f"call {q(n['lock'])}(15)")
    assert e5.value.sqlstate == "CF006"
    assert conn.execute(f"select {q(n['release'])}()").fetchone() == (True,)
    assert conn.execute(f"select {q(n['release'])}()").fetchone() == (False,)
    with pytest.raises(psycopg.Error) as e6:
        conn.execute(f"call {q(n['lock'])}(15, '1969-12-31 23:59:59+00')")
    assert e6.value.sqlstate == "CF007"
    # The client maps them.
    conn.autocommit = False
    conn.execute("select 1")
    with pytest.raises(LockInTransaction), ORDERS.write(conn, 15):
        pass
    conn.rollback()
    conn.autocommit = True
    with pytest.raises(WrongMode):
        ITEMS.write(conn, 15).__enter__()
    with pytest.raises(InvalidArgument):
        ORDERS.read_page(conn, 15, cursor=b"\x00", page_size=10)


def test_a_failed_write_rolls_back_and_releases_the_lock(
    pg_uri: str,
    conn: psycopg.Connection[Any],
    feeds: dict[str, dict[str, str]],
    admin: psycopg.Connection[Any],
) -> None:
    with pytest.raises(RuntimeError, match="boom"), ORDERS.write(conn, 16) as w:
        w.insert_events([(1,)])
        raise RuntimeError("boom")
    assert (
        conn.autocommit is True
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )
    session = admin.execute(
        f"select state from {q(feeds['orders']['session'])} where shard_id = 16 and write_id = %s",
        (w.write_id,),
    ).fetchone()
    assert session == (2,), "the rolled-back write is abandoned"
    with connect(pg_uri) as other:
        started = time.monotonic()
        with ORDERS.write(other, 16) as w2:
            w2.insert_events([(2,)])
        assert time.monotonic() - started < 2.0, "the lock was released at once"
    assert [e.key for e in _events(conn, ORDERS, 16)] == [(2,)]
    # A write that fails at COMMIT time (a deferred constraint) is rolled back and released too.
    conn.execute("create temp table cf_deferred (x int unique deferrable initially deferred)")
    with pytest.raises(psycopg.errors.UniqueViolation), ORDERS.write(conn, 16) as w3:
        w3.insert_events([(3,)])
        conn.execute("insert into cf_deferred values (1), (1)")
    with ORDERS.write(conn, 16) as w4:
        w4.insert_events([(4,)])
    assert [e.key for e in _events(conn, ORDERS, 16)] == [(2,), (4,)]


def test_update_state_and_commit_travel_as_one_simple_query(
    conn: psycopg.Connection[Any], pg_uri: str
) -> None:
    """psycopg 3 sends a parameterless multi-statement string as one simple query."""
    for i in range(8):  # beyond psycopg's prepare threshold
        with ORDERS.write(conn, 17) as w:
            w.insert_events([(i,)])
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with connect(pg_uri) as other:
        assert len(_events(other, ORDERS, 17)) == 8


_INSERT_ORDER = "insert into cf_proto.orders (order_id) values (%s)"


def _written(admin: psycopg.Connection[Any], shard: int) -> tuple[list[int], list[int]]:
    """The source rows of ``shard``'s order ids (``shard * 1000`` on) and its events' keys."""
    rows = admin.execute(
        "select order_id from cf_proto.orders where order_id / 1000 = %s order by 1", (shard,)
    ).fetchall()
    return [r[0] for r in rows], [e.key[0] for e in _events(admin, ORDERS, shard)]


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "no-autocommit"])
def test_a_body_transaction_is_part_of_the_write(
    pg_uri: str,
    admin: psycopg.Connection[Any],
    feeds: dict[str, dict[str, str]],
    autocommit: bool,
) -> None:
    """A body's own ``with conn.transaction():`` is a savepoint in the write's transaction:
    an exception after it leaves neither its rows nor their events; a body whose
    transaction ends normally commits both, once."""
    shard = 60 if autocommit else 61
    base = shard * 1000
    with connect(pg_uri, autocommit=autocommit) as c:
        with pytest.raises(RuntimeError, match="after"), ORDERS.write(c, shard) as w:
            with c.transaction():
                c.execute(_INSERT_ORDER, (base + 1,))
            w.insert_events([(base + 1,)])
            raise RuntimeError("after the body's transaction")
        with pytest.raises(RuntimeError, match="after"), ORDERS.write(c, shard) as w:
            with c.transaction():
                c.execute(_INSERT_ORDER, (base + 2,))
                w.insert_events([(base + 2,)])
            raise RuntimeError("after the body's transaction")
        with ORDERS.write(c, shard) as w:  # a savepoint the body rolls back, and goes on
            with pytest.raises(RuntimeError, match="inside"), c.transaction():
                c.execute(_INSERT_ORDER, (base + 3,))
                w.insert_events([(base + 3,)])
                raise RuntimeError("inside the body's transaction")
            with c.transaction():
                c.execute(_INSERT_ORDER, (base + 4,))
                w.insert_events([(base + 4,)])
        assert c.autocommit is autocommit
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _written(admin, shard) == ([base + 4], [base + 4])


def test_a_body_cannot_end_the_write_transaction(
    pg_uri: str, admin: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    """conn.commit(), conn.rollback() and a change of autocommit in the body are refused
    before they reach the server; psycopg.Rollback rolls the write back quietly; a COMMIT
    sent as SQL cannot be stopped, but the write refuses to publish after it."""
    shard = 62
    base = shard * 1000
    with connect(pg_uri, autocommit=False) as c:
        ends = [c.commit, c.rollback, lambda: setattr(c, "autocommit", True)]
        for n, end in enumerate(ends, start=1):
            with pytest.raises(psycopg.ProgrammingError), ORDERS.write(c, shard) as w:
                c.execute(_INSERT_ORDER, (base + n,))
                w.insert_events([(base + n,)])
                end()
        with ORDERS.write(c, shard) as w:
            c.execute(_INSERT_ORDER, (base + 10,))
            w.insert_events([(base + 10,)])
            raise psycopg.Rollback()
        broken = pytest.raises(WriteTransactionBroken, match="ended the write's transaction")
        with broken, ORDERS.write(c, shard) as w:
            c.execute(_INSERT_ORDER, (base + 20,))
            w.insert_events([(base + 20,)])
            c.execute("commit")
        with ORDERS.write(c, shard) as w:  # every write above released the lock
            c.execute(_INSERT_ORDER, (base + 30,))
            w.insert_events([(base + 30,)])
        assert c.autocommit is False
    # The SQL COMMIT committed the row with its event (the write, abandoned, holds back
    # nothing); nothing else of the refused writes is left.
    assert _written(admin, shard) == ([base + 20, base + 30], [base + 20, base + 30])


# -- sessions, safe point, tombstones, burning ------------------------------------------------


def test_pending_write_and_safe_point(
    pg_uri: str, conn: psycopg.Connection[Any], admin: psycopg.Connection[Any]
) -> None:
    with ORDERS.write(conn, 18) as w:
        w.insert_events([(1,)])
    head = ORDERS.safe_point(admin, 18).head
    with ORDERS.write(conn, 18) as w:
        w.insert_events([(2,)])
        during = ORDERS.safe_point(admin, 18)
        assert during.pending == 1
        # The lock call allocated the block: the head covers it, the safe point stops below it.
        block_end = w.ulid_high + (w.block_start + BLOCK - 1).to_bytes(8, "big", signed=True)
        assert during.head == block_end
        just_below = (int.from_bytes(w.first_ulid, "big") - 1).to_bytes(16, "big")
        assert head <= during.safe_point == just_below
        assert [e.key for e in ORDERS.read_page(admin, 18).events] == [(1,)]
    after = ORDERS.safe_point(admin, 18)
    assert after.pending == 0
    assert after.head == w.ulid_high + (w.block_start + BLOCK - 1).to_bytes(8, "big", signed=True)
    assert [e.key for e in ORDERS.read_page(admin, 18).events] == [(1,), (2,)]


def test_a_tombstoned_write_cannot_commit(
    conn: psycopg.Connection[Any], admin: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    n = feeds["orders"]
    pid = conn.info.backend_pid
    with pytest.raises(WriteAbandoned) as raised, ORDERS.write(conn, 19) as w:
        w.insert_events([(1,)])
        state_before = _state(admin, n, 19)
        assert ORDERS.tombstone(admin, 19, pid, w.write_id) is True
        assert ORDERS.tombstone(admin, 19, pid, w.write_id) is False
    assert raised.value.retryable and raised.value.sqlstate == "CF001"
    state_after = _state(admin, n, 19)
    assert state_after[3] == state_before[3] + 1, "the generation is burned"
    assert state_after[:3] == state_before[:3], "the block was allocated by the lock call"
    incident = admin.execute(
        f"select reason, holder_session_id, holder_write_id from {q(n['incident'])} "
        "where shard_id = 19"
    ).fetchall()
    assert incident == [("tombstone", pid, w.write_id)]
    with ORDERS.write(conn, 19) as w2:
        w2.insert_events([(2,)])
    assert [e.key for e in _events(conn, ORDERS, 19)] == [(2,)]


def test_a_stalled_holder_is_burned_after_the_stall_timeout(
    pg_uri: str, feeds: dict[str, dict[str, str]], admin: psycopg.Connection[Any]
) -> None:
    n = feeds["stall"]
    with connect(pg_uri) as frozen, connect(pg_uri) as waiter:
        with STALL.write(waiter, 1, time_hint=T0) as first:  # the state is now at T0
            first.insert_events([(0,)])
        with pytest.raises(WriteAbandoned), STALL.write(frozen, 1, time_hint=T0) as held:
            held.insert_events([(1,)])  # uncommitted rows in its block
            started = time.monotonic()
            with STALL.write(waiter, 1, time_hint=T0) as w:
                # Same millisecond: without retiring the holder's block this write would
                # get the same block, and its insert would wait on the holder's rows.
                w.insert_events([(1,)])
            waited = time.monotonic() - started
        assert 0.35 < waited < 3.0, waited
        assert held.block_start == first.block_start + BLOCK
        assert w.block_start == held.block_start + BLOCK
        assert w.ulid_high == held.ulid_high == first.ulid_high
    incidents = admin.execute(
        f"select reason, generation, holder_write_id, waited_ms from {q(n['incident'])} "
        "where shard_id = 1"
    ).fetchall()
    assert len(incidents) == 1 and incidents[0][:3] == ("stall", 0, held.write_id)
    assert incidents[0][3] >= 380
    assert _state(admin, n, 1)[3] == 1
    assert [e.key for e in _events(admin, STALL, 1)] == [(0,), (1,)]


def test_a_dead_holder_is_burned_even_while_other_shards_are_busy(
    pg_uri: str, feeds: dict[str, dict[str, str]], admin: psycopg.Connection[Any]
) -> None:
    """Progress is per shard: writes on shard 3 must not keep shard 2's waiters waiting."""
    stop = threading.Event()
    busy_writes = 0

    def busy() -> None:
        nonlocal busy_writes
        with connect(pg_uri) as c:
            while not stop.is_set():
                with STALL.write(c, 3) as w:
                    w.insert_events([(busy_writes,)])
                busy_writes += 1

    with connect(pg_uri) as frozen, connect(pg_uri) as waiter:
        thread = threading.Thread(target=busy)
        thread.start()
        try:
            with pytest.raises(WriteAbandoned), STALL.write(frozen, 2) as held:
                held.insert_events([(1,)])
                started = time.monotonic()
                with STALL.write(waiter, 2) as w:
                    w.insert_events([(2,)])
                waited = time.monotonic() - started
        finally:
            stop.set()
            thread.join()
    assert busy_writes > 5
    assert waited < 3.0, waited
    assert [e.key for e in _events(admin, STALL, 2)] == [(2,)]


def test_a_slow_queue_is_not_mistaken_for_a_dead_holder(
    pg_uri: str, feeds: dict[str, dict[str, str]], admin: psycopg.Connection[Any]
) -> None:
    """Each holder takes 150 ms, so waiters time out (400 ms) behind 3 others; no burns."""
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            with connect(pg_uri) as c:
                for i in range(3):
                    with STALL.write(c, 4) as w:
                        w.insert_events([(k * 100 + i,)])
                        time.sleep(0.15)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert admin.execute(
        f"select count(*) from {q(feeds['stall']['incident'])} where shard_id = 4"
    ).fetchone() == (0,)
    assert len(_events(admin, STALL, 4)) == 12


def test_concurrent_writers_commit_in_ulid_order(
    pg_uri: str, admin: psycopg.Connection[Any]
) -> None:
    """A1 under contention: blocks never interleave, and a write that finished before
    another started has smaller ULIDs."""
    spans: list[tuple[float, float, bytes, int]] = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        with connect(pg_uri) as c:
            for i in range(15):
                started = time.monotonic()
                with ORDERS.write(c, 30) as w:
                    w.insert_events([(k * 1000 + i,), (k * 1000 + 500 + i,)])
                with lock:
                    spans.append((started, time.monotonic(), w.first_ulid, k))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = _events(admin, ORDERS, 30)
    assert len(events) == 180 and len({e.ulid for e in events}) == 180
    blocks = [block_of(e.ulid) for e in events]
    runs = [b for i, b in enumerate(blocks) if i == 0 or blocks[i - 1] != b]
    assert len(runs) == len(set(runs)) == 90, "each write's events are one contiguous block"
    for a in spans:
        for b in spans:
            if a[1] < b[0]:
                assert a[2] < b[2]


# -- blocking mode: the next writer does not wait for a commit ------------------------------


def _update_state_without_commit(conn: psycopg.Connection[Any], shard: int, key: int) -> bytes:
    """Drive one write by hand up to update_state(), leaving its COMMIT for the caller:
    the moment a committing write is in, after it released the lock. Returns its ULID."""
    info = ORDERS.info(conn)
    conn.autocommit = True
    high, start = conn.execute(f"call {info.q('lock')}(%s, null)", (shard,)).fetchone()[1:]  # type: ignore[index]
    conn.autocommit = False
    conn.execute(
        f"insert into {info.q('feed')} (shard_id, ulid, order_id) "
        f"values (%s, {ORDERS.ulid_sql(conn)}, %s)",
        (shard, key),
    )
    conn.execute(f"select {info.q('update_state')}()")
    return bytes(high) + int(start).to_bytes(8, "big", signed=True)


def test_the_next_writer_allocates_while_the_previous_commit_is_in_flight(
    pg_uri: str, admin: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    """4.3/4.4: a writer's lock call never waits for its predecessor's COMMIT, and readers
    stay below the predecessor's block until that commit (S1, R1)."""
    shard = 32
    with connect(pg_uri) as a, connect(pg_uri) as b:
        a_ulid = _update_state_without_commit(a, shard, 1)
        # Protocol 1 read the state row FOR SHARE here and waited for A's COMMIT.
        b.execute("set statement_timeout = '3s'")
        with ORDERS.write(b, shard) as wb:
            wb.insert_events([(2,)])
        assert wb.first_ulid > a_ulid, "B allocates above A's block"

        during = ORDERS.safe_point(admin, shard)
        assert during.pending == 1
        assert during.safe_point == (int.from_bytes(a_ulid, "big") - 1).to_bytes(16, "big")
        assert _events(admin, ORDERS, shard) == [], "B committed, but A's block is below it"
        barrier = ORDERS.barrier_acquire(admin, shard)
        assert barrier.position == wb.first_ulid, "the barrier waits for B's committed event"
        assert ORDERS.barrier_check(admin, barrier) is False

        a.commit()
        assert ORDERS.safe_point(admin, shard).pending == 0
        assert [(e.key, e.ulid) for e in _events(admin, ORDERS, shard)] == [
            ((1,), a_ulid), ((2,), wb.first_ulid)
        ]
        assert ORDERS.barrier_check(admin, barrier) is True


def test_a_commit_that_fails_after_update_state_holds_readers_until_reaped_or_released(
    pg_uri: str, admin: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    """A write whose COMMIT fails after update_state is pending again: the safe point
    stays below it (it might still have been committing) until the next lock call reaps
    it, or until its own release()."""
    shard = 33
    with connect(pg_uri) as a, connect(pg_uri) as b:
        _update_state_without_commit(a, shard, 1)
        with ORDERS.write(b, shard) as wb:
            wb.insert_events([(2,)])
        a.rollback()  # as if its COMMIT had failed
        assert ORDERS.safe_point(admin, shard).pending == 1
        assert _events(admin, ORDERS, shard) == []
        with ORDERS.write(b, shard) as wc:  # the next lock call reaps A's session
            wc.insert_events([(3,)])
        assert [e.key for e in _events(admin, ORDERS, shard)] == [(2,), (3,)]
        ORDERS.release(a)  # the protocol's step after a failed commit; A was reaped already

        _update_state_without_commit(a, shard, 4)
        a.rollback()
        assert ORDERS.safe_point(admin, shard).pending == 1
        assert ORDERS.release(a) is True  # what write() does after a failed commit
        point = ORDERS.safe_point(admin, shard)
        assert point.pending == 0 and point.safe_point == point.head
        assert [e.key for e in _events(admin, ORDERS, shard)] == [(2,), (3,)]


# -- outbox mode -----------------------------------------------------------------------------------


def _outbox_txn(
    conn: psycopg.Connection[Any], shard: int, keys: list[tuple[int, str]], hint: datetime
) -> None:
    with conn.transaction():
        ITEMS.insert_outbox(conn, shard, keys, time_hint=hint)


def test_outbox_happy_day(
    conn: psycopg.Connection[Any], admin: psycopg.Connection[Any], feeds: dict[str, dict[str, str]]
) -> None:
    s = 40
    txns = [
        ([(1, "a"), (1, "b")], T0 + timedelta(seconds=2)),
        ([(2, "c"), (2, "d"), (2, "e")], T0 + timedelta(seconds=1)),  # out of order
        ([(3, "f")], T0 + timedelta(seconds=3)),
        ([(4, "g"), (4, "h")], T0),
    ]
    for keys, hint in txns:
        _outbox_txn(conn, s, keys, hint)
    assert ITEMS.move_outbox(conn, s) == 8
    assert ITEMS.move_outbox(conn, s) == 0
    assert admin.execute(
        f"select count(*) from {q(feeds['items']['outbox'])} where shard_id = %s", (s,)
    ).fetchone() == (0,)
    events = _events(conn, ITEMS, s)
    assert [e.key for e in events] == [k for keys, _ in txns for k in keys]
    times = [ulid_time_ms(e.ulid) for e in events]
    assert times == [T0_MS + 2000] * 5 + [T0_MS + 3000] * 3, "a running maximum of the hints"
    blocks = [block_of(e.ulid) for e in events]
    assert blocks[0] == blocks[1] and blocks[2] == blocks[3] == blocks[4] and blocks[6] == blocks[7]
    assert len(set(blocks)) == 4
    assert blocks[2][1] == blocks[0][1] + 1, "the same millisecond continues with the next block"

    # Pages end at transaction boundaries; a page never splits a transaction.
    pages, cursor = [], ZERO_ULID
    while True:
        page = ITEMS.read_page(conn, s, cursor, page_size=4)
        if not page.events:
            break
        pages.append([e.key for e in page.events])
        cursor = page.cursor
    assert pages == [
        [(1, "a"), (1, "b")],
        [(2, "c"), (2, "d"), (2, "e"), (3, "f")],
        [(4, "g"), (4, "h")],
    ]
    # Re-reading from zero returns the same ULIDs.
    assert [e.ulid for e in _events(conn, ITEMS, s)] == [e.ulid for e in events]


def test_outbox_transactions_are_never_split_and_late_commits_are_not_skipped(
    pg_uri: str, conn: psycopg.Connection[Any]
) -> None:
    s = 41
    with connect(pg_uri, autocommit=False) as a, connect(pg_uri, autocommit=False) as b:
        ITEMS.insert_outbox(a, s, [(1, "a1")])
        ITEMS.insert_outbox(b, s, [(1, "b1")])
        ITEMS.insert_outbox(a, s, [(1, "a2")])
        ITEMS.insert_outbox(b, s, [(1, "b2")])
        b.commit()
        first = ITEMS.read_page(conn, s)  # moves b only: a is not committed
        assert [e.key for e in first.events] == [(1, "b1"), (1, "b2")]
        a.commit()
    second = ITEMS.read_page(conn, s, first.cursor)
    assert [e.key for e in second.events] == [(1, "a1"), (1, "a2")]
    assert second.events[0].ulid > first.cursor, "a late commit lands above the head"
    assert block_of(second.events[0].ulid) == block_of(second.events[1].ulid)


def test_transactions_larger_than_a_page_come_whole(conn: psycopg.Connection[Any]) -> None:
    s = 42
    _outbox_txn(conn, s, [(1, "x")], T0)
    _outbox_txn(conn, s, [(2, f"{i:04}") for i in range(2500)], T0)
    _outbox_txn(conn, s, [(3, "y")], T0)
    sizes, cursor = [], ZERO_ULID
    while True:
        page = ITEMS.read_page(conn, s, cursor, page_size=1000)
        if not page.events:
            break
        sizes.append(len(page.events))
        cursor = page.cursor
    assert sizes == [1, 2500, 1]


def test_outbox_read_barrier(pg_uri: str, conn: psycopg.Connection[Any]) -> None:
    s = 43
    with connect(pg_uri) as writer:
        _outbox_txn(writer, s, [(1, "before")], T0)
    barrier = ITEMS.barrier_acquire(conn, s)
    assert barrier.outbox_sequence is not None
    assert ITEMS.barrier_check(conn, barrier) is False, "the committed row is not moved yet"
    ITEMS.barrier_wait(conn, s, timeout_s=5, barrier=barrier)
    assert ITEMS.barrier_check(conn, barrier) is True
    assert [e.key for e in ITEMS.read_page(conn, s).events] == [(1, "before")]
    blocking = ORDERS.barrier_acquire(conn, 31)
    assert blocking.outbox_sequence is None and ORDERS.barrier_check(conn, blocking)


def test_outbox_rejects_time_hints_outside_the_ulid_range(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        _outbox_txn(conn, 44, [(1, "old")], datetime(1960, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(WrongMode):
        ITEMS.write(conn, 44).__enter__()
    with pytest.raises(WrongMode):
        ORDERS.move_outbox(conn, 44)


def test_shards_and_snapshot_requests_as_on_sql_server(conn: psycopg.Connection[Any]) -> None:
    """PostgresFeed.shards/snapshot_begin/snapshot_finish/snapshots: the SqlServerFeed
    methods of the same names, with the same arguments, checks and results."""
    s = 93
    with ORDERS.write(conn, s) as w:
        w.insert_events([(930,)])
    assert s in ORDERS.shards(conn)
    assert s not in ITEMS.shards(conn)
    before = datetime.now(timezone.utc).replace(tzinfo=None)
    made = ITEMS.snapshot_begin(conn, s, key_from=[1, "a"])
    assert (made.shard_id, made.key_from, made.key_to) == (s, '[1, "a"]', None)
    assert ulid_low(made.last_ulid) - ulid_low(made.first_ulid) == BLOCK - 1
    assert made.requested_at.tzinfo is None and made.requested_at >= before - timedelta(seconds=1)
    assert (made.finished_at, made.rows_landed) == (None, None)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # committed
    assert made in ITEMS.snapshots(conn, pending_only=True)
    assert s in ITEMS.shards(conn)  # the reserved block made a state row
    with pytest.raises(InvalidArgument, match="key_from must be None or a list of 2 values"):
        ITEMS.snapshot_begin(conn, s, key_from=5)
    with pytest.raises(InvalidArgument, match="shard must be an integer"):
        ITEMS.snapshot_begin(conn, "0")  # type: ignore[arg-type]
    with conn.transaction(), pytest.raises(LockInTransaction, match="outside a transaction"):
        ITEMS.snapshot_begin(conn, s)
    assert ITEMS.snapshot_finish(conn, made.snapshot_id, 12) is True
    assert ITEMS.snapshot_finish(conn, made.snapshot_id, 12) is False
    with pytest.raises(InvalidArgument, match="no snapshot request"):
        ITEMS.snapshot_finish(conn, 10**12, 0)
    with pytest.raises(InvalidArgument, match="rows_landed must be in"):
        ITEMS.snapshot_finish(conn, made.snapshot_id, -1)
    done = [r for r in ITEMS.snapshots(conn) if r.snapshot_id == made.snapshot_id]
    assert done[0].rows_landed == 12 and done[0].finished_at is not None
    assert made.snapshot_id not in [r.snapshot_id for r in ITEMS.snapshots(conn, True)]
