"""SqlServerFeed's T-SQL, pinned statement by statement (tests/support/sqlserver_fake.py).

No SQL Server can run here, so these tests pin the text pymssql would send and how the
client reacts to the answers and errors a server gives (scripted); whether the server
accepts them is for the live suite (tests/sqlserver_live, CHANGEFEED_SQLSERVER_DSN).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from pymssql import OperationalError
from tests.support.sqlserver_fake import FakeServer

from changefeed.client import (
    ZERO_ULID,
    Barrier,
    BarrierTimeout,
    CaptureLost,
    ChangefeedError,
    FeedNotFound,
    FellBehindRetention,
    InvalidArgument,
    LockInTransaction,
    NeedsUpgrade,
    NoWriteInProgress,
    Retained,
    Snapshot,
    SqlServerFeed,
    UlidRangeError,
    WriteAbandoned,
    WriteOutsideBlock,
    WriteTransactionBroken,
    WrongMode,
)
from changefeed.dialects.sqlserver.client import registered_feeds

KEYS = [["order_id", "bigint"]]
WRITE_ID = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
LOCK = (
    "set nocount on;\n"
    "set implicit_transactions off;\n"
    "declare @w uniqueidentifier, @h binary(8), @l bigint;\n"
    "exec [changefeed].[lock:shop.orders] @shard_id = {shard}, @time_hint = {hint}, "
    "@stall_timeout_ms = NULL, @lock_probe_ms = NULL, "
    "@write_id = @w output, @ulid_high = @h output, @ulid_low = @l output;\n"
    "begin transaction;\n"
    "select @w as write_id, @h as ulid_high, @l as ulid_low, @@spid as session_id;"
)
PUBLISH = (
    "if @@trancount <> 1\n"
    "begin\n"
    "    declare @cf_message nvarchar(2048) = concat(N'changefeed: the write''s transaction is "
    "at nesting level ', @@trancount, N', not 1: its body ended it (a COMMIT or ROLLBACK of "
    "its own; what such a COMMIT committed stays) or left a BEGIN TRANSACTION of its own "
    "open; update_state did not run: roll back and release');\n"
    "    throw 51072, @cf_message, 1;\n"
    "end;\n"
    "exec [changefeed].[update_state:shop.orders];\ncommit;"
)
RELEASE = "if @@trancount > 0 rollback;\nexec [changefeed].[release:shop.orders];"


def u(n: int) -> bytes:
    return n.to_bytes(16, "big")


class Conn:
    """The fake's connection with pymssql's ``autocommit_state``."""

    def __init__(self, server: FakeServer, autocommit: bool = True) -> None:
        self.server = server
        self.autocommit_state = autocommit

    def cursor(self) -> Any:
        return self.server.connect().cursor()


RETENTION_KINDS = ("retention", "consumer", "retain", "save_cursor", "forget_consumer")
SNAPSHOT_KINDS = ("snapshot", "snapshot_begin", "snapshot_finish")


def feed(
    mode: str = "blocking", retention: bool = True, snapshots: bool = True
) -> tuple[SqlServerFeed, FakeServer, Conn]:
    server = FakeServer()
    names = {k: f"{k}:shop.orders" for k in (
        "lock", "update_state", "release", "ulid", "sequence", "feed", "outbox", "read_feed",
        "safe_point", "tombstone", "barrier_acquire", "barrier_check", "shards",
        *(RETENTION_KINDS if retention else ()),
        *(SNAPSHOT_KINDS if snapshots else ()))}  # fmt: skip
    server.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'shop\.orders'",
              (["mode", "keys", "names", "source_schema", "source_table"],
               [(mode, json.dumps(KEYS), json.dumps(names), "shop", "orders")]))  # fmt: skip
    client, conn = SqlServerFeed("shop.orders"), Conn(server)
    client.info(conn)
    server.statements.clear()
    return client, server, conn


def locked(server: FakeServer) -> None:
    columns = ["write_id", "ulid_high", "ulid_low", "session_id"]
    server.on(r"\[lock:shop\.orders\]", (columns, [(str(WRITE_ID), bytes(range(8)), 2**36, 57)]))


def test_a_write_is_one_lock_batch_the_events_and_one_publish_batch() -> None:
    client, server, conn = feed()
    locked(server)
    server.on(r"^insert into", ([], []))
    server.on(r"exec \[changefeed\]\.\[update_state", ([], []))
    with client.write(conn, 3, datetime(2030, 1, 2, 3, 4, 5)) as w:
        assert w.insert_events([(42,), (43,)]) == 2
    assert (w.write_id, w.session_id, w.first_ulid) == (
        WRITE_ID, 57, bytes(range(8)) + (2**36).to_bytes(8, "big"),
    )  # fmt: skip
    assert w.ulid_sql == (
        "[changefeed].[ulid:shop.orders](next value for [changefeed].[sequence:shop.orders])"
    )
    assert server.statements == [
        LOCK.format(shard=3, hint="'2030-01-02 03:04:05.000'"),
        "insert into [changefeed].[feed:shop.orders] (shard_id, ulid, [order_id]) "
        "select 3, [changefeed].[ulid:shop.orders](next value for "
        "[changefeed].[sequence:shop.orders] over (order by v.n)), v.k0 "
        "from (values (0, 42), (1, 43)) as v (n, k0)",
        PUBLISH,
    ]


def test_a_failing_body_rolls_back_and_releases() -> None:
    client, server, conn = feed()
    locked(server)
    server.on(r"^if @@trancount", ([], []))
    with pytest.raises(RuntimeError, match="app failed"), client.write(conn, 0):
        raise RuntimeError("app failed")
    assert server.statements == [LOCK.format(shard=0, hint="NULL"), RELEASE]


def test_an_abandoned_write_is_retryable_and_released() -> None:
    client, server, conn = feed()
    locked(server)
    server.on(r"^if @@trancount", ([], []))
    server.on(r"update_state", OperationalError(
        51012, b"changefeed: the write was abandoned (stall; lock generation 1 -> 2)\n"
        b"DB-Lib error message 20018, severity 16:\nGeneral SQL Server error"))  # fmt: skip
    with pytest.raises(WriteAbandoned) as caught, client.write(conn, 0):
        pass
    assert caught.value.retryable
    assert str(caught.value) == (
        "changefeed: the write was abandoned (stall; lock generation 1 -> 2) "
        "(SQL Server error 51012)"
    )
    assert server.statements[-2:] == [PUBLISH, RELEASE]


def test_a_body_that_ends_or_leaves_open_a_transaction_is_refused_and_released() -> None:
    """The publish batch checks @@trancount = 1 before update_state: a body's own COMMIT
    (level 0) or an unclosed BEGIN TRANSACTION (level 2) raises 51072 there, as
    WriteTransactionBroken, and the write is rolled back and released."""
    client, server, conn = feed()
    locked(server)
    server.on(r"^if @@trancount > 0", ([], []))
    server.on(r"^if @@trancount <> 1", OperationalError(
        51072, b"changefeed: the write's transaction is at nesting level 2, not 1: its body "
        b"ended it (...) or left a BEGIN TRANSACTION of its own open; update_state did not "
        b"run: roll back and release\nDB-Lib error message 20018, severity 16:\n"))  # fmt: skip
    refused = pytest.raises(WriteTransactionBroken, match="nesting level 2")
    with refused as caught, client.write(conn, 0):
        pass
    assert not caught.value.retryable
    assert server.statements == [LOCK.format(shard=0, hint="NULL"), PUBLISH, RELEASE]


def test_write_refuses_a_connection_in_a_transaction() -> None:
    client, server, conn = feed()
    conn.autocommit_state = False  # pymssql's default: BEGIN TRAN is always open
    with pytest.raises(LockInTransaction, match=r"autocommit=True"), client.write(conn, 0):
        pass
    assert server.statements == []
    # A session with an explicit transaction: the lock refuses (51001); released after.
    conn.autocommit_state = True
    server.on(r"\[lock:", OperationalError(51001, b"changefeed: must be called outside"))
    server.on(r"^if @@trancount", ([], []))
    with pytest.raises(LockInTransaction, match="51001"), client.write(conn, 0):
        pass
    assert server.statements[-1] == RELEASE


@pytest.mark.parametrize(
    ("number", "message", "expected"),
    [
        (245, b"Conversion failed: 'changefeed: ulid offset 68719476736 is outside this "
              b"transaction's block'", UlidRangeError),
        (245, b"Conversion failed: 'changefeed: no write in progress'", NoWriteInProgress),
        (51002, b"changefeed: @shard_id must not be NULL", InvalidArgument),
        (51065, b"changefeed: read_feed needs @cursor, a ULID of 16 bytes", InvalidArgument),
        (51066, b"changefeed: a row ... is outside this write's shard", WriteOutsideBlock),
        (51068, b"changefeed: the source table [shop].[items] of the feed shop.items "
                b"(capture: trigger) has lost its capture trigger", CaptureLost),
        (51021, b"changefeed: could not take the outbox mover lock", ChangefeedError),
    ],
)  # fmt: skip
def test_errors_map_to_the_postgres_classes(
    number: int, message: bytes, expected: type[ChangefeedError]
) -> None:
    client, server, conn = feed()
    locked(server)
    server.on(r"^if @@trancount", ([], []))
    server.on(r"^insert into", OperationalError(number, message))
    with pytest.raises(expected) as caught, client.write(conn, 0) as w:
        w.insert_events([(1,)])
    assert type(caught.value) is expected
    # A plain SQL Server error stays pymssql's.
    server.on(r"^insert into", OperationalError(2627, b"Violation of PRIMARY KEY"))
    with pytest.raises(OperationalError), client.write(conn, 0) as w:
        w.insert_events([(1,)])


def test_outbox_insert_and_modes() -> None:
    client, server, conn = feed("outbox")
    server.on(r"^insert into", ([], []))
    assert client.insert_outbox(conn, 2, [(7,)], time_hint=datetime(2030, 1, 1)) == 1
    assert client.insert_outbox(conn, 2, [(8,), (9,)]) == 2
    assert client.insert_outbox(conn, 2, []) == 0
    assert server.statements == [
        "insert into [changefeed].[outbox:shop.orders] (shard_id, time_hint, [order_id]) "
        "values (2, '2030-01-01 00:00:00.000', 7)",
        "insert into [changefeed].[outbox:shop.orders] (shard_id, [order_id]) "
        "values (2, 8), (2, 9)",
    ]
    with pytest.raises(WrongMode, match="write is for blocking mode"), client.write(conn, 0):
        pass


def test_read_page_validates_and_reads() -> None:
    client, server, conn = feed()
    server.on(r"read_feed", (["ulid", "order_id"], [(u(5), 50), (u(4), 40)]))
    page = client.read_page(conn, 1, u(3), 10)
    assert server.statements == [
        f"exec [changefeed].[read_feed:shop.orders] @shard_id = 1, @cursor = 0x{u(3).hex()}, "
        "@page_size = 10"
    ]
    assert [(e.shard_id, e.ulid, e.key) for e in page.events] == [
        (1, u(4), (40,)),
        (1, u(5), (50,)),
    ]
    assert page.cursor == u(5)
    for bad in (None, b"short", "01ARZ3NDEKTSV4RRFFQ69G5FAV"):
        with pytest.raises(InvalidArgument, match="16 bytes"):
            client.read_page(conn, 1, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="shard must be an int"):
        client.read_page(conn, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="page_size"):
        client.read_page(conn, 1, ZERO_ULID, 0)


def test_safe_point_tombstone_shards_and_registry() -> None:
    client, server, conn = feed()
    server.on(r"safe_point", (["shard_id", "safe_point", "head", "pending", "generation"],
                              [(0, u(7), u(9), 1, 0)]))  # fmt: skip
    server.on(r"tombstone", (["won"], [(1,)]))
    server.on(r"\[shards:", (["shard_id"], [(0,), (4,)]))
    server.on(r"select feed_id, mode", (["feed_id", "mode"], [("shop.orders", "blocking")]))
    point = client.safe_point(conn, 0)
    assert (point.safe_point, point.head, point.pending) == (u(7), u(9), 1)
    assert client.tombstone(conn, 0, 57, WRITE_ID)
    with pytest.raises(InvalidArgument, match="write_id must be a uuid"):
        client.tombstone(conn, 0, 57, 12)
    assert client.shards(conn) == [0, 4]
    assert registered_feeds(conn) == {"shop.orders": "blocking"}
    assert server.statements == [
        "exec [changefeed].[safe_point:shop.orders] @shard_id = 0",
        "exec [changefeed].[tombstone:shop.orders] @shard_id = 0, @session_id = 57, "
        f"@write_id = N'{WRITE_ID}'",
        "exec [changefeed].[shards:shop.orders]",
        "select feed_id, mode from [changefeed].[feeds] order by feed_id",
    ]


def test_barrier_wait_moves_the_outbox_and_times_out() -> None:
    client, server, conn = feed("outbox")
    server.on(r"barrier_acquire", (["position", "outbox_sequence"], [(u(9), 12)]))
    checks = iter([0, 0, 1])
    server.on(r"barrier_check", lambda sql: (["released"], [(next(checks),)]))
    server.on(r"safe_point", (["shard_id", "safe_point", "head", "pending"], [(0, u(8), u(8), 0)]))
    server.on(r"read_feed", (["ulid", "order_id"], [(u(9), 90)]))
    assert client.barrier_wait(conn, 0, poll_s=0) == Barrier(0, u(9), 12)
    assert server.statements == [
        "exec [changefeed].[barrier_acquire:shop.orders] @shard_id = 0",
        f"exec [changefeed].[barrier_check:shop.orders] @shard_id = 0, @position = 0x{u(9).hex()}, "
        "@outbox_sequence = 12",
        "exec [changefeed].[safe_point:shop.orders] @shard_id = 0",
        f"exec [changefeed].[read_feed:shop.orders] @shard_id = 0, @cursor = 0x{u(8).hex()}, "
        "@page_size = 10000",
        server.statements[1],
        server.statements[1],
    ]
    server.on(r"barrier_check", (["released"], [(0,)]))
    with pytest.raises(BarrierTimeout, match="not released within 0"):
        client.barrier_wait(conn, 0, timeout_s=0, poll_s=0)


def test_an_unknown_feed_names_the_known_ones() -> None:
    server = FakeServer()
    server.on(r"where feed_id = ", (["mode"], []))
    server.on(r"select feed_id from", (["feed_id"], [("shop.items",)]))
    with pytest.raises(FeedNotFound, match=r"Known feeds: shop\.items"):
        SqlServerFeed("shop.orders").info(Conn(server))


def test_keys_and_arguments_are_checked_as_postgres_checks_them() -> None:
    """SqlServerWrite.insert_events, insert_outbox and move_outbox use client/checks.py like
    PostgresFeed: a key of the wrong width or with a None, a time_hint that is not a
    datetime, max_rows below 1 fail before any round trip."""
    client, server, conn = feed()
    locked(server)
    server.on(r"^if @@trancount", ([], []))
    for bad, message in (([(1, 2)],  r"sequence of 1 value\(s\) \(order_id\)"),
                         ([(None,)], r"must not be None"),
                         (["7"], r"sequence of 1 value"),
                         ("77", r"iterable of key tuples")):  # fmt: skip
        with pytest.raises(InvalidArgument, match=message), client.write(conn, 0) as w:
            w.insert_events(bad)
    assert not [s for s in server.statements if s.startswith("insert")]
    outbox, server, conn = feed("outbox")
    with pytest.raises(InvalidArgument, match="must not be None"):
        outbox.insert_outbox(conn, 0, [(None,)])
    with pytest.raises(InvalidArgument, match="time_hint must be None or a datetime"):
        outbox.insert_outbox(conn, 0, [(1,)], time_hint="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max_rows must be in"):
        outbox.move_outbox(conn, 0, 0)
    assert server.statements == []


def test_retention_calls_the_procedures_as_postgres_calls_its_functions() -> None:
    """retain, save_cursor, forget_consumer, consumers and retention_horizon: one statement
    each, the arguments checked before any round trip, 51062 as FellBehindRetention."""
    client, server, conn = feed()
    server.on(r"\[retain:", (
        ["shard_id", "removed", "horizon", "held_for_consumers", "slowest_consumer"],
        [(0, 5, u(9), 2, "lake"), (1, 0, None, 0, None)]))  # fmt: skip
    server.on(r"\[save_cursor:", ([], []))
    server.on(r"\[forget_consumer:", (["forgotten"], [(3,)]))
    server.on(r"from \[changefeed\]\.\[consumer:", (["consumer", "shard_id", "cursor"],
                                                  [("lake", 0, u(4))]))  # fmt: skip
    server.on(r"from \[changefeed\]\.\[retention:", (["shard_id", "horizon"], [(0, u(9))]))
    done = client.retain(conn, max_age=timedelta(days=7), keep_last=100)
    assert done == [Retained(0, 5, u(9), 2, "lake"), Retained(1, 0, None, 0, None)]
    client.retain(conn, keep_last=0, override_consumers=True, shard=1)
    client.save_cursor(conn, "lake", 0, u(4))
    assert client.forget_consumer(conn, "lake") == 3
    assert client.consumers(conn) == [("lake", 0, u(4))]
    assert client.retention_horizon(conn, 0) == u(9)
    assert server.statements == [
        "exec [changefeed].[retain:shop.orders] @max_age_ms = 604800000, @keep_last = 100, "
        "@override_consumers = 0, @shard_id = NULL",
        "exec [changefeed].[retain:shop.orders] @max_age_ms = NULL, @keep_last = 0, "
        "@override_consumers = 1, @shard_id = 1",
        "exec [changefeed].[save_cursor:shop.orders] @consumer = N'lake', @shard_id = 0, "
        f"@cursor = 0x{u(4).hex()}",
        "exec [changefeed].[forget_consumer:shop.orders] @consumer = N'lake'",
        "select consumer, shard_id, [cursor] from [changefeed].[consumer:shop.orders] "
        "order by consumer, shard_id",
        "select shard_id, horizon from [changefeed].[retention:shop.orders] where shard_id in (0)",
    ]
    server.statements.clear()
    for call, message in (
        (lambda: client.retain(conn), "needs a policy"),
        (lambda: client.retain(conn, keep_last=-1), "keep_last must be in"),
        (lambda: client.retain(conn, max_age=7), "max_age must be a timedelta"),
        (lambda: client.save_cursor(conn, "", 0, u(1)), "consumer must be a name"),
        (lambda: client.save_cursor(conn, "lake", 0, b"short"), "16 bytes"),
        (lambda: client.forget_consumer(conn, "x" * 201), "consumer must be a name"),
    ):
        with pytest.raises(InvalidArgument, match=message):
            call()
    assert server.statements == []
    server.on(r"\[save_cursor:", OperationalError(
        51062, b"changefeed: a reader of shop.orders shard 0 fell behind retention"))  # fmt: skip
    with pytest.raises(
        FellBehindRetention, match=r"fell behind retention \(SQL Server error 51062\)"
    ):
        client.save_cursor(conn, "lake", 0, u(1))
    old, server, conn = feed(retention=False)
    with pytest.raises(NeedsUpgrade, match="upgrade_feed"):
        old.retain(conn, keep_last=1)
    assert old.consumers(conn) == [] and old.retention_horizon(conn, 0) is None
    assert server.statements == []


def test_snapshots_call_the_procedures_and_check_the_key_bounds() -> None:
    """snapshot_begin (then the request's row), snapshot_finish and the list of requests:
    one statement each; the bounds are JSON arrays of one scalar per key column, checked
    before any round trip; 51070 is InvalidArgument, 51071 LockInTransaction."""
    client, server, conn = feed()
    row = (7, 0, u(1 << 36), u((2 << 36) - 1), "[1000]", None, datetime(2030, 1, 2), None, None)
    server.on(r"\[snapshot_begin:", (["snapshot_id", "first_ulid"], [(7, u(1 << 36))]))
    server.on(r"from \[changefeed\]\.\[snapshot:", (["snapshot_id"], [row]))
    server.on(r"\[snapshot_finish:", (["finished"], [(True,)]))
    request = client.snapshot_begin(conn, 0, key_from=[1000])
    assert request == Snapshot(7, 0, u(1 << 36), u((2 << 36) - 1), "[1000]", None,
                               datetime(2030, 1, 2), None, None)  # fmt: skip
    assert client.snapshot_finish(conn, 7, 12) is True
    assert client.snapshots(conn, pending_only=True) == [request]
    columns = ("snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at, "
               "finished_at, rows_landed")  # fmt: skip
    assert server.statements == [
        "exec [changefeed].[snapshot_begin:shop.orders] @shard_id = 0, @key_from = N'[1000]', "
        "@key_to = NULL",
        f"select {columns} from [changefeed].[snapshot:shop.orders] where snapshot_id = 7",
        "exec [changefeed].[snapshot_finish:shop.orders] @snapshot_id = 7, @rows_landed = 12",
        f"select {columns} from [changefeed].[snapshot:shop.orders] where finished_at is null "
        "order by snapshot_id",
    ]
    server.statements.clear()
    for call, message in (
        (lambda: client.snapshot_begin(conn, None), "shard must be an integer"),
        (lambda: client.snapshot_begin(conn, 0, key_from=1000), "a list of 1 value \\(order_id\\)"),
        (lambda: client.snapshot_begin(conn, 0, key_to=[1, 2]), "a list of 1 value"),
        (lambda: client.snapshot_begin(conn, 0, key_to=[None]), "string, number or boolean"),
        (lambda: client.snapshot_finish(conn, 7, -1), "rows_landed must be in"),
    ):
        with pytest.raises(InvalidArgument, match=message):
            call()
    with pytest.raises(LockInTransaction, match="autocommit"):
        client.snapshot_begin(Conn(server, autocommit=False), 0)
    assert server.statements == []
    server.on(r"\[snapshot_finish:", OperationalError(
        51070, b"changefeed: snapshot_finish on shop.orders: no snapshot request 9"))  # fmt: skip
    with pytest.raises(InvalidArgument, match=r"no snapshot request 9 \(SQL Server error 51070\)"):
        client.snapshot_finish(conn, 9, 0)
    server.on(r"\[snapshot_begin:", OperationalError(
        51071, b"changefeed: snapshot_begin needs a transaction of its own"))  # fmt: skip
    with pytest.raises(LockInTransaction, match="51071"):
        client.snapshot_begin(conn, 0)
    old, server, conn = feed(snapshots=False)
    with pytest.raises(NeedsUpgrade, match="without snapshots"):
        old.snapshot_begin(conn, 0)
    assert old.snapshots(conn) == [] and server.statements == []


def test_release_says_whether_there_was_a_write_to_release() -> None:
    """As PostgreSQL's release does: the session context names the shard lock of an open
    write until update_state or release clears it (tests/test_dialects.py checks the rest
    of the two clients' likeness)."""
    held = (
        "select case when session_context(N'changefeed/ff8f5c0c322d3c39f41e32d54227ff09/n') "
        "is null then 0 else 1 end;"
    )
    for answer in (1, 0):
        client, server, conn = feed()
        server.on(r"session_context", (["held"], [(answer,)]))
        server.on(r"\[release:shop\.orders\]", ([], []))
        assert client.release(conn) is bool(answer)
        assert server.statements == [held, RELEASE]


def test_a_client_from_a_registry_entry_does_not_read_it_again() -> None:
    from changefeed.client import FeedInfo, KeyColumn, PostgresFeed, SqlServerFeed

    info = FeedInfo("shop.orders", "cf", "blocking", (KeyColumn("id", "bigint"),), {})
    for cls in (PostgresFeed, SqlServerFeed):
        client = cls.from_info(info)
        assert type(client) is cls and (client.feed_id, client.schema) == ("shop.orders", "cf")
        assert client.info(None) is info  # no connection: nothing is read
