"""The exact T-SQL the Spark source sends to SQL Server, pinned with a recording fake.

SQL Server cannot run on this machine, so this is the one place where a fake database
stands in: a DB-API connection that records every statement, rendered by pymssql's own
parameter substitution (``pymssql._mssql.substitute_params``), i.e. the text pymssql
sends, and answers from a script. The same code runs against a real server in
``tests/sqlserver_live/test_spark_source_live.py`` (needs ``CHANGEFEED_SQLSERVER_DSN``).
Planning and paging are the code PostgreSQL uses; only the backend differs.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from pymssql import _mssql
from tests.support.sqlserver_fake import Answer, FakeServer

from changefeed.client import CannotConnect, ChangefeedError
from changefeed.dialects.base import MAX_MOVES, MOVE_ROWS
from changefeed.dialects.sqlserver.client import PAYLOAD_CHUNK, connect_arguments
from changefeed.dialects.sqlserver.reads import SqlServerBackend
from changefeed.spark.feedtable import TableName
from changefeed.spark.landing import _landing
from changefeed.spark.source import (
    ChangefeedSourceError,
    _source,
    parse_connection,
    parse_options,
    read_range,
)

FEED = "dbo.orders"
NAMES = {"read_feed": "read_feed:dbo.orders", "safe_point": "safe_point:dbo.orders",
         "feed": "feed:dbo.orders",
         "outbox": "outbox:dbo.orders", "state": "state:dbo.orders",
         "shards": "shards:dbo.orders"}  # fmt: skip
KEYS = [{"name": "order_id", "data_type": "bigint", "collation": None}]
URI = "mssql://reader:pw@db.example:1433/shop"


def u(n: int) -> bytes:
    """A ULID whose last byte is ``n`` (ordered like n)."""
    return bytes(15) + bytes([n])


def registry(server: FakeServer, mode: str = "blocking") -> None:
    server.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'dbo\.orders'",
              (["mode", "keys", "names", "source_schema", "source_table"],
               [(mode, json.dumps(KEYS), json.dumps(NAMES), "dbo", "orders")]))  # fmt: skip


def safe_points(server: FakeServer, points: dict[int, bytes]) -> None:
    server.on(r"^exec \[changefeed\]\.\[safe_point:dbo\.orders\]$",
              (["shard_id", "safe_point", "head", "pending"],
               [(s, p, p, 0) for s, p in sorted(points.items())]))  # fmt: skip


def shards(server: FakeServer, listed: list[int]) -> None:
    rows: list[tuple[Any, ...]] = [(s,) for s in listed]
    server.on(r"^exec \[changefeed\]\.\[shards:dbo\.orders\]$", (["shard_id"], rows))


def feed_pages(server: FakeServer, events: dict[int, list[tuple[bytes, int]]]) -> None:
    """read_feed answers from ``events`` (shard -> [(ulid, order_id)]), pages of the asked size."""

    def page(sql: str) -> Answer:
        m = re.search(r"@shard_id = (-?\d+), @cursor = 0x([0-9a-f]{32}), @page_size = (\d+)$", sql)
        assert m, sql
        shard, cursor, size = int(m.group(1)), bytes.fromhex(m.group(2)), int(m.group(3))
        rows = [(ulid, key) for ulid, key in events.get(shard, []) if ulid > cursor][:size]
        return ["ulid", "order_id"], rows

    server.on(r"^exec \[changefeed\]\.\[read_feed:dbo\.orders\] ", page)


def backend(server: FakeServer) -> SqlServerBackend:
    return SqlServerBackend(parse_connection(URI), "changefeed", connect=server.connect)


def test_connect_arguments() -> None:
    args = connect_arguments(
        "mssql://app%40corp:p%3Ass@sql.example:14330/shop%20db?tds_version=7.4",
        application_name="changefeed-spark",
    )
    assert args == {"server": "sql.example", "port": 14330, "user": "app@corp", "password": "p:ss",
                    "database": "shop db", "autocommit": True, "login_timeout": 15,
                    "appname": "changefeed-spark", "tds_version": "7.4"}  # fmt: skip
    with pytest.raises(CannotConnect, match="parameter 'driver' is not supported"):
        connect_arguments("mssql://a:b@h/db?driver=x")
    with pytest.raises(ChangefeedSourceError, match="parameter 'driver' is not supported"):
        SqlServerBackend(parse_connection("mssql://a:b@h/db?driver=x"), "changefeed",
                         connect=FakeServer().connect)  # fmt: skip
    # user/password options replace the URI's, so the secret can stay out of the URI.
    connection = parse_connection("sqlserver://h:1433/db", user="app", password="s3:cr/t")
    assert connect_arguments(connection.uri)["password"] == "s3:cr/t"


def test_describe_reads_the_registry() -> None:
    server = FakeServer()
    registry(server)
    info = backend(server).describe(FEED, payload=False)
    assert server.statements == [
        "select mode, keys, names, source_schema, source_table from [changefeed].[feeds] "
        "where feed_id = N'dbo.orders'"
    ]
    assert (info.mode, info.keys[0].name, info.keys[0].db_type) == (
        "blocking",
        "order_id",
        "bigint",
    )
    assert info.name("read_feed") == "read_feed:dbo.orders"
    assert server.connects[0]["server"] == "db.example"


def test_describe_with_payload_reads_the_source_columns() -> None:
    server = FakeServer()
    registry(server)
    server.on(r"from sys\.columns", (["name", "type", "max_length", "precision", "scale",
                                       "column_id"], [
        ("order_id", "bigint", 8, 19, 0, 1), ("amount", "decimal", 9, 12, 2, 2),
        ("note", "nvarchar", -1, 0, 0, 4), ("at", "datetime2", 8, 27, 3, 5),
        ("tag", "uniqueidentifier", 16, 0, 0, 6)]))  # fmt: skip
    info = backend(server).describe(FEED, payload=True)
    assert server.statements[-1] == (
        "select c.name, t.name, c.max_length, c.precision, c.scale, c.column_id from sys.columns "
        "as c join sys.types as t on t.user_type_id = c.user_type_id "
        "where c.object_id = object_id(N'[dbo].[orders]') order by c.column_id"
    )
    # the column_id, which a rename keeps (a landed table tells a rename by it)
    assert [c.number for c in info.payload or ()] == [1, 2, 4, 5, 6]
    assert info.layout().spark_schema().simpleString() == (
        "struct<shard_id:int,ulid:binary,order_id:bigint,payload:struct<order_id:bigint,"
        "amount:decimal(12,2),note:string,at:timestamp_ntz,tag:string>>"
    )


def test_unknown_feed_and_missing_registry_are_named() -> None:
    server = FakeServer()
    server.on(r"where feed_id = ", (["mode"], []))
    server.on(r"select feed_id from", (["feed_id"], [("dbo.carts",), ("sales.items",)]))
    expected = r"unknown feed 'dbo\.orders'.*Known feeds: dbo\.carts, sales\.items"
    with pytest.raises(ChangefeedSourceError, match=expected):
        backend(server).describe(FEED, payload=False)

    server = FakeServer()
    server.on(r"where feed_id = ", _mssql.MSSQLDatabaseException(208, b"Invalid object name"))
    with pytest.raises(ChangefeedSourceError, match=r"no feed registry \[changefeed\]\.\[feeds\]"):
        backend(server).describe(FEED, payload=False)


def test_unreachable_server_is_named_without_the_password() -> None:
    def refuse(**kwargs: Any) -> Any:
        raise _mssql.MSSQLDatabaseException(
            20009, b"Unable to connect: Adaptive Server is unavailable"
        )

    with pytest.raises(ChangefeedSourceError) as info:
        SqlServerBackend(parse_connection(URI), "changefeed", connect=refuse)
    assert "cannot connect to SQL Server at mssql://reader:***@db.example:1433/shop" in str(
        info.value
    )
    assert "pw" not in str(info.value).replace("mssql://reader:***", "")


def test_safe_points_and_shards() -> None:
    server = FakeServer()
    registry(server, mode="outbox")
    safe_points(server, {0: u(9), 3: u(20)})
    shards(server, [0, 3, 5])
    b = backend(server)
    info = b.describe(FEED, payload=False)
    server.statements.clear()

    assert b.shards(info) == [0, 3, 5]
    assert b.safe_points(info, [0, 5]) == {0: u(9), 5: bytes(16)}
    assert server.statements == [
        "exec [changefeed].[shards:dbo.orders]",
        "exec [changefeed].[safe_point:dbo.orders]",
    ]


def test_outbox_moves_loop_until_caught_up() -> None:
    """Review item #5: one plan publishes every committed source transaction of a shard,
    not one. read_feed moves whole transactions up to a page's worth; here shard 0 has
    three pages' worth published by successive calls (the fake's read_feed returns the
    events after the cursor, as the moved ones appear), shard 5 nothing."""
    server = FakeServer()
    registry(server, mode="outbox")
    safe_points(server, {0: u(9)})
    moved = [(n.to_bytes(16, "big"), n) for n in range(10, 10 + 2 * MOVE_ROWS + 3)]
    feed_pages(server, {0: moved})
    b = backend(server)
    info = b.describe(FEED, payload=False)
    server.statements.clear()

    b.move_outbox(info, [0, 5])

    def read_feed(shard: int, cursor: bytes) -> str:
        return (
            f"exec [changefeed].[read_feed:dbo.orders] @shard_id = {shard}, "
            f"@cursor = 0x{cursor.hex()}, @page_size = {MOVE_ROWS}"
        )

    assert server.statements == [
        "exec [changefeed].[safe_point:dbo.orders]",
        # From the safe point, then from each page's last event until a page is empty.
        read_feed(0, u(9)),
        read_feed(0, moved[MOVE_ROWS - 1][0]),
        read_feed(0, moved[2 * MOVE_ROWS - 1][0]),
        read_feed(0, moved[-1][0]),
        read_feed(5, bytes(16)),
    ]


def test_outbox_moves_stop_after_max_moves() -> None:
    """A shard whose writers outpace the mover does not hold the plan forever."""
    server = FakeServer()
    registry(server, mode="outbox")
    safe_points(server, {})
    server.on(r"read_feed", (["ulid", "order_id"], [(u(1), 1)]))
    b = backend(server)
    info = b.describe(FEED, payload=False)
    server.statements.clear()
    b.move_outbox(info, [0])
    assert sum("read_feed" in s for s in server.statements) == MAX_MOVES


def test_pages_up_to_the_planned_end() -> None:
    server = FakeServer()
    registry(server)
    events = {1: [(u(n), 100 + n) for n in range(1, 12)]}
    feed_pages(server, events)
    safe_points(server, {1: u(30)})
    b = backend(server)
    info = b.describe(FEED, payload=False)
    server.statements.clear()

    pages = list(read_range(b, info, 1, u(2), u(8), page_size=4))
    assert pages == [[(1, u(n), 100 + n) for n in (3, 4, 5, 6)], [(1, u(7), 107), (1, u(8), 108)]]
    assert server.statements == [
        f"exec [changefeed].[read_feed:dbo.orders] @shard_id = 1, @cursor = 0x{u(2).hex()}, "
        "@page_size = 4",
        f"exec [changefeed].[read_feed:dbo.orders] @shard_id = 1, @cursor = 0x{u(6).hex()}, "
        "@page_size = 4",
    ]
    # At the end of the events: an empty page, then a check that the safe point still
    # covers the planned end (it would not if the feed had been re-created).
    server.statements.clear()
    assert list(read_range(b, info, 1, u(8), u(30), page_size=4)) == [
        [(1, u(n), 100 + n) for n in (9, 10, 11)]
    ]
    assert server.statements[-1] == "exec [changefeed].[safe_point:dbo.orders]"
    safe_points(server, {1: u(11)})  # the feed went backwards (re-created)
    with pytest.raises(ChangefeedSourceError, match=r"below .* that this read was planned up to"):
        list(read_range(b, info, 1, u(11), u(30), page_size=4))


def test_payload_lookup_in_chunks() -> None:
    server = FakeServer()
    registry(server)
    server.on(r"from sys\.columns", (["name", "type", "max_length", "precision", "scale",
                                       "column_id"],
              [("order_id", "bigint", 8, 19, 0, 1), ("amount", "money", 8, 19, 4, 2)]))  # fmt: skip
    count = PAYLOAD_CHUNK + 3
    feed_pages(
        server,
        {
            0: [(u(1), 10_000)]
            + [(bytes(14) + n.to_bytes(2, "big"), n) for n in range(2, count + 1)]
        },
    )
    lookups: list[str] = []

    def source_rows(sql: str) -> Answer:
        lookups.append(sql)
        keys = [int(k) for k in re.findall(r"\((\d+)\)", sql.split(" as v(")[0])]
        return ["order_id", "order_id", "amount"], [
            (k, k, Decimal("1.5")) for k in keys if k != 10_000
        ]

    server.on(r"from \(values ", source_rows)
    b = backend(server)
    info = b.describe(FEED, payload=True)
    page = b.read_page(info, 0, bytes(16), count)
    assert len(page) == count and len(lookups) == 2
    assert lookups[1] == (
        "select v.[order_id], s.[order_id], s.[amount] from (values (501), (502), (503)) "
        "as v([order_id]) join [dbo].[orders] as s on s.[order_id] = v.[order_id]"
    )
    assert page[0] == (0, u(1), 10_000, False, None, None)  # no source row: null payload
    assert page[1][3:] == (True, 2, Decimal("1.5"))


def test_batch_planning_and_reading_share_the_postgres_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The data source's planner and partition reader, on the SQL Server backend."""
    server = FakeServer()
    registry(server)
    safe_points(server, {0: u(6), 1: u(3)})
    shards(server, [0, 1])
    feed_pages(server, {0: [(u(n), n) for n in range(1, 9)], 1: [(u(2), 50)]})
    monkeypatch.setattr(_source, "open_backend", lambda connection, schema: backend(server))
    options = parse_options({"connection": URI, "feed": FEED, "pageSize": "3"})
    info = _source.describe(options)
    starts, ends = _source.plan_cursors(options, info)
    assert (starts, ends) == ({0: bytes(16), 1: bytes(16)}, {0: u(6), 1: u(3)})
    partitions = _source.partitions_for(options, info, starts, ends)
    rows = [r for p in partitions for batch in _source.read_partition(p) for r in batch.to_pylist()]
    assert [(r["shard_id"], r["order_id"]) for r in rows] == [(0, n) for n in range(1, 7)] + [
        (1, 50)
    ]
    assert server.closed >= 3  # every backend opened was closed


def test_the_landing_probe_for_new_events() -> None:
    server = FakeServer()
    registry(server)
    server.on(r"^select top \(1\) 1 from", (["x"], [(1,)]))
    b = backend(server)
    info = b.describe(FEED, payload=False)
    assert b.has_events(info, 3, u(1), u(9)) is True
    assert server.statements[-1] == (
        "select top (1) 1 from [changefeed].[feed:dbo.orders] "
        f"where shard_id = 3 and ulid > 0x{u(1).hex()} and ulid <= 0x{u(9).hex()}"
    )


def test_a_feed_without_shards_procedure_asks_for_an_upgrade() -> None:
    server = FakeServer()
    registry(server)
    b = backend(server)
    info = b.describe(FEED, payload=False)
    names = {k: v for k, v in info.names.items() if k != "shards"}
    info = replace(info, info=replace(info.info, names=names))
    with pytest.raises(ChangefeedSourceError, match=r"run changefeed\.upgrade_feed"):
        b.shards(info)


def test_the_landing_checks_and_registers_its_cursors_under_retention() -> None:
    """The landing's (and a consumer-named stream's) retention calls on SQL Server: the
    horizons of the shards it starts from, then save_cursor per shard; a feed set up
    without retention sends neither; 51062 (below the horizon) names the consumer."""
    server = FakeServer()
    retention = {
        **NAMES,
        "retention": "retention:dbo.orders",
        "save_cursor": "save_cursor:dbo.orders",
    }
    row = ("blocking", json.dumps(KEYS), json.dumps(retention), "dbo", "orders")
    server.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'dbo\.orders'",
              (["mode", "keys", "names", "source_schema", "source_table"], [row]))  # fmt: skip
    server.on(r"^select shard_id, horizon from", (["shard_id", "horizon"], [(2, u(4))]))
    server.on(r"^exec \[changefeed\]\.\[save_cursor:", ([], []))
    b = backend(server)
    info = b.describe(FEED, payload=False)
    assert b.horizons(info, [0, 2]) == {2: u(4)}
    b.save_cursors(info, "lake.orders", {2: u(7), 0: u(5)})
    assert server.statements[-3:] == [
        "select shard_id, horizon from [changefeed].[retention:dbo.orders] "
        "where shard_id in (0, 2)",
        "exec [changefeed].[save_cursor:dbo.orders] @consumer = N'lake.orders', @shard_id = 0, "
        f"@cursor = 0x{u(5).hex()}",
        "exec [changefeed].[save_cursor:dbo.orders] @consumer = N'lake.orders', @shard_id = 2, "
        f"@cursor = 0x{u(7).hex()}",
    ]
    server.on(r"^exec \[changefeed\]\.\[save_cursor:", _mssql.MSSQLDatabaseException(
        51062, b"changefeed: a reader of dbo.orders shard 2 fell behind retention"))  # fmt: skip
    with pytest.raises(
        ChangefeedSourceError, match=r"consumer 'lake\.orders'.*fell behind retention"
    ):
        b.save_cursors(info, "lake.orders", {2: u(1)})
    old = replace(info, info=replace(info.info, names=NAMES))
    server.statements.clear()
    assert b.horizons(old, [0]) == {}
    b.save_cursors(old, "lake.orders", {0: u(5)})
    assert server.statements == []


def test_the_landing_writer_lock_and_source_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The landing's writer lock (a session applock, not waited for) as pymssql sends it:
    taken (0), held by another session (-1: the landing's one-line refusal, the
    connection closed), or failed otherwise; and the source identity it records."""
    server = FakeServer()
    registry(server)
    results = iter([0, -1, -999])
    server.on(r"exec @r = sys\.sp_getapplock", lambda sql: (["result"], [(next(results),)]))
    server.on(r"^select cast\(serverproperty", (["server", "db"], [("SQL1\\PROD", "shop")]))
    b = backend(server)
    assert b.try_writer_lock("Landing.Orders") is None
    assert server.statements[-1] == (
        "set nocount on;\ndeclare @r int;\n"
        "exec @r = sys.sp_getapplock @Resource = N'changefeed/land/landing.orders', "
        "@LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0, "
        "@DbPrincipal = 'public';\nselect @r as result;"
    )
    assert b.source_identity() == "sqlserver:SQL1\\PROD/shop"
    monkeypatch.setattr(_landing, "open_backend", lambda *_: backend(server))
    closed = server.closed
    with pytest.raises(ChangefeedSourceError) as held:
        _landing.check_source({"connection": URI, "feed": FEED}, "`landing`.orders")
    assert str(held.value) == (
        "table landing.orders is being landed by another landing, another session of this "
        "database on mssql://reader:***@db.example:1433/shop: a table has one writer at a "
        "time; stop that landing or wait for it to end, then run this one again"
    )
    assert server.closed == closed + 1
    with pytest.raises(ChangefeedError, match=r"sp_getapplock for the landing of t\.x failed"):
        b.try_writer_lock("t.x")


@pytest.mark.parametrize(
    ("target", "locked"),
    [
        ("`spark_catalog`.landing.orders", "landing.orders"),
        ("`land``ing`.`or.ders`", "land`ing.or.ders"),
        (" iceberg . landing . orders ", "iceberg.landing.orders"),
    ],
)
def test_the_check_before_spark_locks_what_the_landing_locks(
    monkeypatch: pytest.MonkeyPatch, target: str, locked: str
) -> None:
    """``check_source`` takes the target's writer lock under the name the landing gives
    it (``TableName.text``), backticks and the session catalog included: a hand split
    of the name once locked another resource, so a running landing went unseen."""
    server = FakeServer()
    registry(server)
    server.on(r"exec @r = sys\.sp_getapplock", (["result"], [(0,)]))
    monkeypatch.setattr(_landing, "open_backend", lambda *_: backend(server))
    _landing.check_source({"connection": URI, "feed": FEED}, target)
    assert TableName.parse_qualified(target).text == locked  # type: ignore[union-attr]
    (taken,) = [s for s in server.statements if "sp_getapplock" in s]
    assert f"@Resource = N'changefeed/land/{locked.lower()}'," in taken


def test_the_check_before_spark_refuses_a_malformed_target() -> None:
    """A target that is no table name fails before any connection, with the landing's
    error; a bare table name is left to the landing (its database is Spark's)."""
    with pytest.raises(ChangefeedSourceError, match=r"^target table: a feed table is named"):
        _landing.check_source({"connection": URI, "feed": FEED}, "a.b.c.d")
    assert TableName.parse_qualified("orders") is None
