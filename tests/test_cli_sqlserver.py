"""``changefeed status``, ``barrier`` and ``retention`` on SQL Server: dispatch and statements.

No SQL Server runs here, so pymssql's ``connect`` is replaced by the recording fake of
tests/support/sqlserver_fake.py (scripted answers; the statements are pymssql's rendering). The
unreachable-server case, a real pymssql login, is in tests/test_cli.py.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta
from typing import Any

import pymssql
import pytest
from tests.support.doc_blocks import sample
from tests.support.sqlserver_fake import FakeServer

from changefeed.cli import build_parser, main
from changefeed.cli.land import source_options

URI = "mssql://reader:pw@sql.example:1433/shop"
NAMES = {k: f"{k}:shop.items" for k in (
    "feed", "outbox", "read_feed", "safe_point", "barrier_acquire", "barrier_check",
    "shards", "retention", "consumer", "retain", "save_cursor", "forget_consumer")}  # fmt: skip


#: When the scripted shard's oldest pending write started (server time, sysutcdatetime()).
STARTED = datetime(2030, 1, 2, 3, 4, 5)


def u(n: int) -> bytes:
    return (1 << 120 | n).to_bytes(16, "big")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    fake.on(r"select feed_id, mode from \[changefeed\]\.\[feeds\]",
            (["feed_id", "mode"], [("shop.items", "outbox")]))  # fmt: skip
    fake.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'shop\.items'",
            (["mode", "keys", "names", "source_schema", "source_table"],
             [("outbox", json.dumps([["sku", "nvarchar(20)"]]), json.dumps(NAMES), "shop",
               "items")]))  # fmt: skip
    fake.on(r"^select json_value\(options, N'\$\.capture'\) from \[changefeed\]\.\[feeds\]",
            (["capture"], [(None,)]))  # fmt: skip
    fake.on(r"^exec \[changefeed\]\.\[shards:shop\.items\]$", (["shard_id"], [(0,)]))
    fake.on(r"safe_point:shop\.items\] @shard_id = 0$",
            (["shard_id", "safe_point", "head", "pending", "oldest_pending_started_at"],
             [(0, u(5), u(6), 1, STARTED)]))  # fmt: skip
    fake.on(r"^select sysutcdatetime\(\)$", (["now"], [(STARTED + timedelta(seconds=12.5),)]))
    fake.on(r"^select count_big\(\*\) from \[changefeed\]\.\[outbox:shop\.items\]",
            (["n"], [(3,)]))  # fmt: skip
    fake.on(r"^select shard_id, horizon from", (["shard_id", "horizon"], []))
    fake.on(r"^select consumer, shard_id, \[cursor\]", (["consumer", "shard_id", "cursor"], []))
    monkeypatch.setattr(pymssql, "connect", fake.connect)
    return fake


def cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_dispatches_to_sql_server(server: FakeServer, capsys: Any) -> None:
    server.on(r"^select \(select count_big", (["n", "first"], [(2, u(4))]))
    code, out, err = cli(capsys, "status", "--connection", URI, "--password", "s3cret",
                         "--json", "--cursor", f"shop.items:0={u(3).hex()}")  # fmt: skip
    assert code == 0, err
    assert server.connects[0]["password"] == "s3cret"
    assert server.connects[0]["appname"] == "changefeed-cli"
    status = json.loads(out)
    assert [(s["feed"], s["shard"], s["pending"], s["outbox"]) for s in status["shards"]] == [
        ("shop.items", 0, 1, 3)
    ]
    assert status["shards"][0]["oldest_pending_age_s"] == 12.5
    assert status["consumers"][0]["lag_events"] == 2
    window = f"where shard_id = 0 and ulid > 0x{u(3).hex()} and ulid <= 0x{u(5).hex()}"
    assert server.statements == [
        "select feed_id, mode from [changefeed].[feeds] order by feed_id",
        "select mode, keys, names, source_schema, source_table from [changefeed].[feeds] "
        "where feed_id = N'shop.items'",
        "select json_value(options, N'$.capture') from [changefeed].[feeds] "
        "where feed_id = N'shop.items'",
        "exec [changefeed].[shards:shop.items]",
        "exec [changefeed].[safe_point:shop.items] @shard_id = 0",
        "select count_big(*) from [changefeed].[outbox:shop.items] where shard_id = 0",
        "select shard_id, horizon from [changefeed].[retention:shop.items] where shard_id in (0)",
        # the oldest pending write's age: safe_point's start time by the server's clock
        "exec [changefeed].[safe_point:shop.items] @shard_id = 0",
        "select sysutcdatetime()",
        "select consumer, shard_id, [cursor] from [changefeed].[consumer:shop.items] "
        "order by consumer, shard_id",
        f"select (select count_big(*) from [changefeed].[feed:shop.items] {window}), "
        f"(select top (1) ulid from [changefeed].[feed:shop.items] {window} order by ulid)",
    ]


def test_status_shows_pending_writes_and_the_outbox_backlog(
    server: FakeServer, capsys: Any
) -> None:
    """The human table, JSON and Prometheus output carry the pending writes with the
    oldest one's age and the outbox backlog, under PostgreSQL's names; a user that may not
    read the outbox (the reader role, error 229) gets no backlog rather than 0."""
    code, out, err = cli(capsys, "status", "--connection", URI)
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split()[-2:] == ["PENDING", "OUTBOX"]
    assert row.endswith("1 (oldest 12.5 s)       3")
    code, out, err = cli(capsys, "status", "--connection", URI, "--format", "prometheus")
    assert code == 0, err
    labels = '{feed="shop.items",shard="0"}'
    assert f"changefeed_pending_writes{labels} 1\n" in out
    assert f"changefeed_oldest_pending_write_age_seconds{labels} 12.5\n" in out
    assert f"changefeed_outbox_rows{labels} 3\n" in out
    server.on(r"^select count_big\(\*\) from \[changefeed\]\.\[outbox:",
              pymssql.OperationalError(229, b"The SELECT permission was denied"))  # fmt: skip
    code, out, err = cli(capsys, "status", "--connection", URI, "--format", "prometheus")
    assert code == 0, err
    assert "changefeed_outbox_rows{" not in out
    assert f"changefeed_oldest_pending_write_age_seconds{labels} 12.5\n" in out


def test_status_asks_capture_check_whether_capture_is_lost(server: FakeServer, capsys: Any) -> None:
    """A capture: trigger feed's capture_check (which read_feed calls at the head) refusing
    with 51068 is PostgreSQL's CF011 in status: CAPTURE LOST, capture_lost, the metric. A
    feed set up before capture_check (2812) or a user without EXECUTE (229) gives None."""
    server.on(r"^select json_value\(options", (["capture"], [("trigger",)]))
    lost = pymssql.OperationalError(
        51068, b"changefeed: the source table [shop].[items] of the feed shop.items (capture: "
        b"trigger) has lost its capture trigger")  # fmt: skip
    server.on(r"^exec \[changefeed\]\.\[capture_check:shop\.items\]$", lost)
    code, out, err = cli(capsys, "status", "--connection", URI)
    assert code == 0, err
    assert "CAPTURE LOST: shop.items (capture: trigger)" in out
    code, out, err = cli(capsys, "status", "--connection", URI, "--json")
    assert json.loads(out)["feeds"] == [
        {"feed": "shop.items", "mode": "outbox", "capture": "trigger", "capture_lost": True}
    ]
    server.on(r"^exec \[changefeed\]\.\[capture_check:shop\.items\]$", ([], []))
    code, out, err = cli(capsys, "status", "--connection", URI, "--format", "prometheus")
    assert 'changefeed_capture_lost{feed="shop.items"} 0\n' in out
    assert 'changefeed_feed_info{feed="shop.items",mode="outbox",capture="trigger"} 1' in out
    for number in (2812, 229):
        server.on(r"^exec \[changefeed\]\.\[capture_check:shop\.items\]$",
                  pymssql.OperationalError(number, b"not there, or not yours"))  # fmt: skip
        code, out, err = cli(capsys, "status", "--connection", URI, "--json")
        assert json.loads(out)["feeds"][0]["capture_lost"] is None, number


def test_barrier_dispatches_to_sql_server(server: FakeServer, capsys: Any) -> None:
    server.on(r"barrier_acquire", (["position", "outbox_sequence"], [(u(5), 7)]))
    server.on(r"barrier_check", (["released"], [(1,)]))
    code, out, err = cli(capsys, "barrier", "--connection", URI.replace("mssql", "sqlserver"),
                         "--feed", "shop.items")  # fmt: skip
    assert code == 0, err
    assert "shop.items shard 0: released in" in out
    assert server.statements[-2:] == [
        "exec [changefeed].[barrier_acquire:shop.items] @shard_id = 0",
        f"exec [changefeed].[barrier_check:shop.items] @shard_id = 0, @position = 0x{u(5).hex()}, "
        "@outbox_sequence = 7",
    ]


def test_retention_runs_the_retain_procedure(server: FakeServer, capsys: Any) -> None:
    server.on(r"\[retain:shop\.items\]", (
        ["shard_id", "removed", "horizon", "held_for_consumers", "slowest_consumer"],
        [(0, 1200, u(5), 30, "lake")]))  # fmt: skip
    code, out, err = cli(capsys, "retention", "--connection", URI, "--feed", "shop.items",
                         "--max-age", "7d", "--json")  # fmt: skip
    assert code == 0, err
    assert server.statements[-1] == (
        "exec [changefeed].[retain:shop.items] @max_age_ms = 604800000, @keep_last = NULL, "
        "@override_consumers = 0, @shard_id = NULL"
    )
    [line] = json.loads(out)
    assert (line["shard"], line["removed"], line["held_for_consumers"]) == (0, 1200, 30)
    assert line["slowest_consumer"] == "lake" and line["horizon"] is not None
    server.on(r"\[retain:shop\.items\]", pymssql.OperationalError(
        229, b"The EXECUTE permission was denied on the object 'retain:shop.items'"))  # fmt: skip
    code, _out, err = cli(capsys, "retention", "--connection", URI, "--feed", "shop.items",
                          "--keep-last", "10")  # fmt: skip
    assert code == 1 and "retention runs as the feed's owner" in err


def test_a_missing_registry_and_an_unknown_feed(server: FakeServer, capsys: Any) -> None:
    server.on(r"where feed_id = N'shop\.nope'", (["mode"], []))
    server.on(r"^select feed_id from", (["feed_id"], [("shop.items",)]))
    code, _out, err = cli(capsys, "barrier", "--connection", URI, "--feed", "shop.nope")
    assert code == 1
    assert "unknown feed 'shop.nope'" in err and "Known feeds: shop.items" in err
    server.on(r"select feed_id, mode", pymssql.OperationalError(208, b"Invalid object name"))
    code, _out, err = cli(capsys, "status", "--connection", URI)
    assert code == 1
    assert "no feed is set up in this database" in err and "pw" not in err


def test_the_operations_sample(
    server: FakeServer, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md's SQL Server commands, as written: the environment it exports,
    status and barrier against the fake, and land's options (Spark not started)."""
    server.on(r"barrier_acquire", (["position", "outbox_sequence"], [(u(5), 7)]))
    server.on(r"barrier_check", (["released"], [(1,)]))
    lines = sample("operations-sqlserver").strip().splitlines()
    exported = shlex.split(lines[0])
    assert exported[0] == "export"
    for assignment in exported[1:]:
        name, _, value = assignment.partition("=")
        monkeypatch.setenv(name, value)
    for line in lines[1:3]:
        code, _out, err = cli(capsys, *shlex.split(line)[1:])
        assert code == 0, (line, err)
    assert server.connects[0]["server"] == "sql.example"
    assert server.connects[0]["password"] == "s3cret"
    land = build_parser().parse_args(shlex.split(lines[3])[1:])
    assert source_options(land) == {"connection": "mssql://etl_reader@sql.example:1433/shop",
                                    "feed": "shop.items", "password": "s3cret"}  # fmt: skip


def test_land_reads_a_sql_server_feed_through_the_spark_source(server: FakeServer) -> None:
    """`changefeed land --connection mssql://...` hands its options to the Spark source,
    which reads SQL Server with the client (pymssql, no JDBC jar). Spark itself is not
    started here: the source's planning runs on the options land builds, against the
    fake, and its statements are pinned (tests/test_source_sqlserver_queries.py pins the
    reading of pages)."""
    from changefeed.spark.source import _source, parse_options

    args = build_parser().parse_args(["land", "--connection", URI, "--password", "s3cret",
                                      "--feed", "shop.items", "--table", "landing.items",
                                      "--shards", "0", "--page-size", "500",
                                      "--no-move-outbox"])  # fmt: skip
    server.on(r"^exec \[changefeed\]\.\[safe_point:shop\.items\]$",
              (["shard_id", "safe_point", "head", "pending"], [(0, u(5), u(6), 1)]))  # fmt: skip
    options = parse_options(source_options(args))
    assert options.connection.dialect == "sqlserver"
    info = _source.describe(options)
    starts, ends = _source.plan_cursors(options, info)
    assert (starts, ends) == ({0: bytes(16)}, {0: u(5)})
    assert {c["password"] for c in server.connects} == {"s3cret"}
    assert {c["appname"] for c in server.connects} == {"changefeed-spark"}
    assert server.statements == [
        "select mode, keys, names, source_schema, source_table from [changefeed].[feeds] "
        "where feed_id = N'shop.items'",
        "exec [changefeed].[safe_point:shop.items]",
        # the start checked against the retention horizon before any task (protocol C5)
        "select shard_id, horizon from [changefeed].[retention:shop.items] where shard_id in (0)",
    ]
