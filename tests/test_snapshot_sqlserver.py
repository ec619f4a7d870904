"""Snapshots of SQL Server feeds (protocol 12.3) without a SQL Server: the T-SQL of the
chunk, sample and estimate reads parses (sqlfluff's tsql dialect) and names the right
objects; the keyset predicates that stand in for row-value comparisons select exactly the
keys a row-value comparison would, and a plan's chunks partition the rows in key order
(both run in SQLite, which reads the same predicate text); the requests go through the
client's procedures (pinned on the recording fake); chunk reads on an executor number
their rows in key order. ``tests/sqlserver_live/test_live_snapshot_landing.py`` lands a
snapshot on a real server (needs ``CHANGEFEED_SQLSERVER_DSN``).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pymssql import _mssql
from tests.support.sqlserver_fake import FakeServer
from tests.support.tsql import all_problems

from changefeed.client.core import FeedInfo, KeyColumn
from changefeed.dialects import dialect_named
from changefeed.dialects.rows import Column
from changefeed.dialects.sqlserver.reads import SqlServerBackend
from changefeed.dialects.sqlserver.snapshot import SourceReader, keyset
from changefeed.spark import source as spark_source
from changefeed.spark.landing import _snapshot, _snapshot_plan
from changefeed.spark.landing._snapshot_plan import Chunk, plan_chunks, snapshot_ulid, split_keys
from changefeed.spark.source import ChangefeedSourceError, SourceFeed, parse_connection

URI = "mssql://reader:pw@db.example:1433/shop"
NAMES = {kind: f"{kind}:dbo.orders" for kind in
         ("feed", "read_feed", "safe_point", "shards", "snapshot", "snapshot_begin",
          "snapshot_finish")}  # fmt: skip
KEYS = (KeyColumn("region", "nvarchar(8)"), KeyColumn("order]id", "bigint"))
PAYLOAD = (Column("region", "nvarchar(8)"), Column("order]id", "bigint"),
           Column("amount", "decimal(12,2)"))  # fmt: skip
BLOCK = bytes(8) + (7 << 36).to_bytes(8, "big")


def feed(keys: tuple[KeyColumn, ...] = KEYS) -> SourceFeed:
    info = FeedInfo("dbo.orders", "changefeed", "outbox", keys, NAMES, dialect="sqlserver")
    payload = (*(Column(k.name, k.data_type) for k in keys), PAYLOAD[-1])
    return SourceFeed(info, payload)


def rendered(sql: str, params: list[Any]) -> str:
    """The statement as pymssql sends it."""
    return _mssql.substitute_params(sql, tuple(params)).decode()


def test_the_statements_parse_as_tsql_and_name_the_source() -> None:
    reader = SourceReader(feed(), "(checksum(region) & 2147483647) % 4")
    chunk = Chunk(3, ("eu", "10"), False, ("us", "99"), True)
    whole = Chunk(-1, None, True, ("us", "99"), True)
    chunk_sql = rendered(*reader.chunk_sql(2, chunk))
    assert chunk_sql == (
        "select s.[region], s.[order]]id], s.[region], s.[order]]id], s.[amount] "
        "from [dbo].[orders] as s where ((checksum(region) & 2147483647) % 4) = 2 and "
        "(s.[region] >= cast(N'eu' as nvarchar(8)) and (s.[region] > cast(N'eu' as nvarchar(8)) "
        "or (s.[region] = cast(N'eu' as nvarchar(8)) and s.[order]]id] > cast(N'10' as bigint)))) "
        "and (s.[region] <= cast(N'us' as nvarchar(8)) and (s.[region] < cast(N'us' as "
        "nvarchar(8)) or (s.[region] = cast(N'us' as nvarchar(8)) and s.[order]]id] <= "
        "cast(N'99' as bigint)))) order by s.[region], s.[order]]id]"
    )
    sampled = rendered(*reader.sample_sql(2, whole, 0.04))
    assert sampled.startswith(
        "select cast(s.[region] as nvarchar(4000)), cast(s.[order]]id] as nvarchar(4000)) "
        "from [dbo].[orders] as s tablesample system (0.040000 percent) where "
    )
    assert sampled.endswith(" order by s.[region], s.[order]]id]")
    dated = SourceReader(feed((KeyColumn("day", "datetime"),)), None)
    unbounded = rendered(*dated.sample_sql(0, Chunk(-1, None, True, None, True), None))
    assert unbounded == (
        "select convert(nvarchar(4000), s.[day], 126) from [dbo].[orders] as s where 1 = 1 "
        "order by s.[day]"
    )
    resumed = rendered(*dated.chunk_sql(0, Chunk(5, ("2024-05-01 10:00:00.123000",), False,
                                                 None, True)))  # fmt: skip
    assert "s.[day] > cast(cast(N'2024-05-01 10:00:00.123000' as datetime2) as datetime)" in (
        resumed
    )
    # pymssql reads `%s` as a placeholder (it has no escape): the operator gets a space
    modulo = SourceReader(feed(), "abs(checksum(region))%shards")
    shard_term = rendered(*modulo.where(1, whole))
    assert shard_term.startswith("(abs(checksum(region))% shards) = 1 and ")
    statements = {"chunk": chunk_sql, "sample": sampled, "unbounded sample": unbounded,
                  "datetime chunk": resumed}  # fmt: skip
    problems = [p for label, sql in statements.items() for p in all_problems(sql, label)]
    assert problems == []


@pytest.mark.parametrize("width", [1, 2, 3])
def test_keyset_selects_what_a_row_value_comparison_would(width: int) -> None:
    names = ["a", "b", "c"][:width]
    db = sqlite3.connect(":memory:")
    db.execute(f"create table t ({', '.join(names)})")
    rows = list(itertools.product(range(3), repeat=width))
    db.executemany(f"insert into t values ({', '.join('?' * width)})", rows)
    compare = {">": tuple.__gt__, ">=": tuple.__ge__, "<": tuple.__lt__, "<=": tuple.__le__}
    for op, bound in itertools.product(compare, itertools.product(range(-1, 4), repeat=width)):
        sql, params = keyset(names, ["int"] * width, op, bound)
        found = db.execute(f"select * from t where {sql.replace('%s', '?')}", params).fetchall()
        assert sorted(found) == [r for r in rows if compare[op](r, bound)], (op, bound, sql)


def test_chunks_partition_the_rows_in_key_order() -> None:
    """The real chunk statements (their T-SQL casts read the same in SQLite) over a
    two-column key, split at sampled keys, resumed above a landed key: every row once,
    in key order, chunk after chunk."""
    db = sqlite3.connect(":memory:")
    db.execute("attach ':memory:' as dbo")
    db.execute("create table dbo.orders (region text, order_id integer, amount, "
               "primary key (region, order_id))")  # fmt: skip
    rows = [(r, i, i * 1.5) for r in ("ap", "eu", "us") for i in range(1, 40)]
    db.executemany("insert into dbo.orders values (?, ?, ?)", rows)
    plain = (KeyColumn("region", "nvarchar(8)"), KeyColumn("order_id", "bigint"))
    reader = SourceReader(feed(plain), None)
    for lower, inclusive, upper in [(None, True, None), (("eu", "12"), False, ("us", "30")),
                                    (("ap", "5"), True, None)]:  # fmt: skip
        low = None if lower is None else (lower[0], int(lower[1]))
        high = None if upper is None else (upper[0], int(upper[1]))
        expected = [
            (r, i, r, i, a)
            for r, i, a in sorted(rows)
            if (low is None or ((r, i) >= low if inclusive else (r, i) > low))
            and (high is None or (r, i) <= high)
        ]  # fmt: skip
        sample = [(r, str(i)) for r, i, *_ in expected[::7]]  # plan() samples the range
        chunks = plan_chunks(split_keys(sample, 6), 4, lower, inclusive, upper)
        assert [c.index for c in chunks] == list(range(4, 4 + len(chunks)))
        assert len(chunks) == 6
        landed = []
        for chunk in chunks:
            sql, params = reader.chunk_sql(0, chunk)
            landed += db.execute(sql.replace("%s", "?"), params).fetchall()
        assert landed == expected


def test_keys_a_snapshot_cannot_plan_by_are_refused() -> None:
    with pytest.raises(ChangefeedSourceError, match="binary key has no text form"):
        SourceReader(feed((KeyColumn("id", "varbinary(16)"),)), None)
    with pytest.raises(ChangefeedSourceError, match="cannot cast its key bounds"):
        SourceReader(feed((KeyColumn("id", "int; drop table x"),)), None)
    with pytest.raises(ChangefeedSourceError, match="with payload=true"):
        SourceReader(SourceFeed(feed().info), None)


def request_row(snapshot_id: int, key_from: str | None = None) -> tuple[Any, ...]:
    last = BLOCK[:8] + ((7 << 36) + (1 << 36) - 1).to_bytes(8, "big")
    return (snapshot_id, 0, BLOCK, last, key_from, None, None, None, None)


def fake_server() -> FakeServer:
    server = FakeServer()
    server.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'dbo\.orders'",
              (["mode", "keys", "names", "source_schema", "source_table"],
               [("outbox", json.dumps([[k.name, k.data_type] for k in KEYS]), json.dumps(NAMES),
                 "dbo", "orders")]))  # fmt: skip
    return server


def test_requests_go_through_the_feeds_procedures() -> None:
    server = fake_server()
    conn = server.connect()
    db = dialect_named("sqlserver").snapshot()
    info = feed()
    server.on(r"where finished_at is null", (["snapshot_id"], [request_row(4, '["eu", 3]')]))
    server.on(r"^exec \[changefeed\]\.\[snapshot_begin", (["snapshot_id", "first_ulid"],
                                                           [(5, BLOCK)]))  # fmt: skip
    server.on(r"where snapshot_id = 5$", (["snapshot_id"], [request_row(5)]))
    server.on(r"^exec \[changefeed\]\.\[snapshot_finish", (["finished"], [(1,)]))
    server.on(
        r"select options from", (["options"], [('{"capture": "trigger", "shard": "x % 2"}',)])
    )
    server.on(r"from sys\.partitions", ([""], [(1234,)]))
    pending = db.pending_requests(conn, info)
    assert [(r.snapshot_id, r.key_from, r.last_ulid > r.first_ulid) for r in pending] == [
        (4, ("eu", 3), True)
    ]
    made = db.request(conn, info, 0, '["eu", 1]', None)
    assert (made.snapshot_id, made.first_ulid, made.key_from) == (5, BLOCK, None)
    db.finish(conn, info, made, 77)
    assert db.shard_expression(conn, info) == "x % 2"
    assert db.estimated_rows(conn, info.info.source) == 1234
    sent = [s for s in server.statements if "[feeds]" not in s]
    assert sent == [
        "select snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at, "
        "finished_at, rows_landed from [changefeed].[snapshot:dbo.orders] "
        "where finished_at is null order by snapshot_id",
        "exec [changefeed].[snapshot_begin:dbo.orders] @shard_id = 0, "
        "@key_from = N'[\"eu\", 1]', @key_to = NULL",
        "select snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at, "
        "finished_at, rows_landed from [changefeed].[snapshot:dbo.orders] where snapshot_id = 5",
        "exec [changefeed].[snapshot_finish:dbo.orders] @snapshot_id = 5, @rows_landed = 77",
        "select sum(p.rows) from sys.partitions as p "
        "where p.object_id = object_id(N'[dbo].[orders]') and p.index_id in (0, 1)",
    ]
    options = [s for s in server.statements if "select options" in s]
    assert options == ["select options from [changefeed].[feeds] where feed_id = N'dbo.orders'"]
    problems = [p for s in [*sent, *options] for p in all_problems(s, s[:40])]
    assert problems == []
    server.on(r"^exec \[changefeed\]\.\[snapshot_finish", Exception(51070, b"unknown snapshot"))
    with pytest.raises(ChangefeedSourceError, match="unknown snapshot"):
        db.finish(conn, info, made, 1)


def test_a_plan_samples_the_range_and_chunks_read_in_key_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = fake_server()
    conn = server.connect()
    info = feed()
    reader = SourceReader(info, None)
    keys = [("eu", str(i)) for i in range(10)]
    server.on(r"from sys\.partitions", ([""], [(10,)]))
    server.on(r"^select cast\(s\.\[region\]", (["a", "b"], keys))
    chunks, estimate = _snapshot_plan.plan(conn, reader, 0, 2, ("eu", "0"), False, None, 4)
    assert estimate == 10
    assert [(c.index, c.lower, c.upper) for c in chunks] == [
        (2, ("eu", "0"), ("eu", "3")), (3, ("eu", "3"), ("eu", "6")), (4, ("eu", "6"), None)
    ]  # fmt: skip
    # With 2 cores the 3 chunks become 4 (no batch with an idle core); with 8 cores, a
    # plan smaller than the cores keeps its 3 chunks instead of becoming 8 tiny ones.
    for cores, count in ((2, 4), (8, 3)):
        planned, _ = _snapshot_plan.plan(conn, reader, 0, 2, ("eu", "0"), False, None, 4, cores)
        assert len(planned) == count, (cores, planned)
    rows = [("eu", i, "eu", i, Decimal(i) / 4) for i in range(7, 10)]
    server.on(r"^select s\.\[region\], s\.\[order\]\]id\]", (["r"], rows))
    monkeypatch.setattr("changefeed.spark.landing._snapshot_plan._ARROW_ROWS", 2)
    monkeypatch.setattr(
        spark_source,
        "open_backend",
        lambda connection, schema: SqlServerBackend(connection, schema, connect=server.connect),
    )
    options = spark_source.parse_options({"connection": URI, "feed": "dbo.orders"})
    read = _snapshot_plan.chunk_reader(options, reader, 0, BLOCK)
    spec = pa.RecordBatch.from_pydict({"spec": [_snapshot_plan.chunk_json(chunks[-1])]})
    batches = list(read(iter([spec])))
    assert [b.num_rows for b in batches] == [2, 1]
    ulids = [u for b in batches for u in b.column("ulid").to_pylist()]
    assert ulids == [snapshot_ulid(BLOCK, 4, r) for r in range(3)]
    assert [k for b in batches for k in b.column("order]id").to_pylist()] == [7, 8, 9]
    assert server.statements[-1].endswith("order by s.[region], s.[order]]id]")
    assert parse_connection(URI).dialect == "sqlserver"


def test_request_snapshot_for_a_sqlserver_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``request_snapshot()`` checks the feed's shards as on PostgreSQL, then reserves
    the block through ``snapshot_begin``."""
    server = fake_server()
    server.on(r"select c\.name, t\.name", (["n"], [(c.name, c.db_type, 0, 0, 0, i)
                                                   for i, c in enumerate(PAYLOAD, 1)]))  # fmt: skip
    server.on(r"select options from", (["options"], [('{"capture": "none"}',)]))
    server.on(r"^exec \[changefeed\]\.\[shards", (["shard_id"], [(0,), (1,)]))
    monkeypatch.setattr(
        spark_source,
        "open_backend",
        lambda connection, schema: SqlServerBackend(connection, schema, connect=server.connect),
    )
    with pytest.raises(ChangefeedSourceError, match=r"events in shard\(s\) 1 besides 0"):
        _snapshot.request({"connection": URI, "feed": "dbo.orders"})
    server.on(r"^exec \[changefeed\]\.\[shards", (["shard_id"], [(0,)]))
    server.on(r"^exec \[changefeed\]\.\[snapshot_begin", (["snapshot_id", "first_ulid"],
                                                           [(9, BLOCK)]))  # fmt: skip
    server.on(r"where snapshot_id = 9$", (["snapshot_id"], [request_row(9, '["eu", 5]')]))
    made = _snapshot.request({"connection": URI, "feed": "dbo.orders"}, key_from='["eu", 5]')
    assert (made.snapshot_id, made.shard, made.key_from) == (9, 0, ("eu", 5))
    assert any(s.startswith("exec [changefeed].[snapshot_begin:dbo.orders] @shard_id = 0, "
                            "@key_from = N'[\"eu\", 5]'") for s in server.statements)  # fmt: skip
