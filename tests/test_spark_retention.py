"""Retention of Spark feeds (docs/protocol.md 11.7), parquet, on local Spark and dbt-spark.

A policy removes exactly the batches it says, oldest first and whole, never a shard's
head; the horizon is the oldest kept batch minus 1. The dbt operation finds the feed's
consumers in the project (and its meta changefeed_consumers) and never passes one
without override_consumers; a consumer behind the horizon fails with "fell behind
retention" in feed_cursor and feed_events; consumers stay exactly-once across retention;
a killed run leaves a contiguous feed. (A landing across retention: tests/test_landing.py.)
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from tests.support.dbt_harness import DbtError, DbtHarness, package_project
from tests.support.doc_blocks import sample
from tests.support.real_parts import unavailable

from changefeed.cli import main
from changefeed.local.jars import ICEBERG_CATALOG
from changefeed.spark.feedtable import (
    FellBehindRetention,
    check_cursor,
    committed_batches,
    consumed_batch,
    feed_heads,
    feed_horizon,
    next_batch,
    retain,
    write_batch,
)

pytestmark = pytest.mark.spark

SCHEMA = "cf_dbtkit"  # the harness's target schema: sources and models live there
FEED = f"{SCHEMA}.ret_feed"
EXTERNAL = f"{SCHEMA}.ret_external"  # a consumer outside the project, listed in the feed's meta
DAY_MS = 86_400_000

SOURCES = f"""\
version: 2
sources:
  - name: ret
    schema: {SCHEMA}
    tables:
      - name: ret_feed
        meta:
          changefeed_feed: true
          changefeed_consumers: ['{EXTERNAL}']
"""

CURSOR = """\
{{ config(materialized='incremental', incremental_strategy='insert_overwrite',
          partition_by=['changefeed_batch'], file_format='parquet') }}
select e.shard_id, e.ulid, e.order_id, e.changefeed_batch as changefeed_feed_batch,
       {{ changefeed.feed_batch() }} as changefeed_batch
from {{ source('ret', 'ret_feed') }} as e
where {{ changefeed.feed_safe_point(source('ret', 'ret_feed'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
"""

EVENTS = """\
{{ config(materialized='incremental', incremental_strategy='insert_overwrite',
          partition_by=['changefeed_batch'], file_format='parquet') }}
{%- set output = this if is_incremental() else none %}
select e.*, {{ changefeed.feed_batch() }} as changefeed_batch
from {{ changefeed.feed_events(source('ret', 'ret_feed'), output) }} as e
"""

#: a state consumer, whose cursor is its cursor table's (protocol 11.8), not its output's
STATE = """\
{{ config(materialized='changefeed_current_state', file_format='parquet', unique_key='order_id') }}
select e.shard_id, e.ulid, e.order_id, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('ret', 'ret_feed'), this) }} as e
"""


def ulid(ms: int, shard: int, n: int) -> bytes:
    return ms.to_bytes(6, "big") + bytes([0, shard]) + n.to_bytes(8, "big")


def land(spark: Any, table: str, events: list[tuple[int, int, int]]) -> int:
    """One batch of (shard, order_id, age in days) events; ULIDs rise with the order id."""
    now = int(time.time() * 1000)
    rows = [(s, ulid(now - age * DAY_MS + oid, s, oid), oid) for s, oid, age in events]
    frame = spark.createDataFrame(rows, "shard_id int, ulid binary, order_id bigint")
    return int(write_batch(spark, table, frame))


def batches(spark: Any, table: str) -> list[int]:
    spark.sql(f"refresh table {table}")
    return committed_batches(spark, table)


def rows(spark: Any, table: str) -> list[tuple[int, int, int]]:
    """(shard, order_id, batch) of every row of a feed, sorted."""
    spark.sql(f"refresh table {table}")
    found = spark.sql(f"select shard_id, order_id, changefeed_batch from {table}").collect()
    return sorted((r[0], r[1], r[2]) for r in found)


def consumed(spark: Any, table: str) -> list[tuple[int, int]]:
    """(shard, order_id) of every row of a consumer's output, sorted."""
    spark.sql(f"refresh table {table}")
    return sorted(
        (r[0], r[1]) for r in spark.sql(f"select shard_id, order_id from {table}").collect()
    )


def test_the_documented_meta_is_the_tested_one() -> None:
    (documented,) = yaml.safe_load(sample("spark-retention-meta"))["sources"][0]["tables"]
    (tested,) = yaml.safe_load(SOURCES)["sources"][0]["tables"]
    assert documented["meta"].keys() == tested["meta"].keys()
    assert all("." in name for name in documented["meta"]["changefeed_consumers"])


def documented_retention(command: str) -> dict[str, Any]:
    """docs/spark.md's run-operation, as arguments for this project's feed."""
    argv = shlex.split(command)
    assert argv[:3] == ["dbt", "run-operation", "changefeed.apply_retention"]
    assert argv[3] == "--args" and len(argv) == 5
    args = yaml.safe_load(argv[4])
    assert args.pop("relation") == "landing.orders_feed"
    return dict(args)


def documented_behind(message: str, consumer: str) -> str:
    """docs/spark.md's "fell behind retention" message, for this project's names."""
    text = message.strip()
    text = text.replace("analytics.orders_current", f"{SCHEMA}.{consumer}")
    return text.replace("landing.orders_feed", FEED).replace("orders_current", consumer)


def test_the_policy_removes_exactly_its_batches_and_never_a_head(spark: Any) -> None:
    table = f"{SCHEMA}.ret_policy"
    spark.sql(f"create database if not exists {SCHEMA}")
    spark.sql(f"drop table if exists {table}")
    for events in ([(0, 1, 3), (0, 2, 3), (1, 3, 3)], [(0, 4, 3)], [(0, 5, 3), (1, 6, 3)],
                   [(0, 7, 0)], [(0, 8, 0), (0, 9, 0), (0, 10, 0)]):  # fmt: skip
        land(spark, table, events)
    before = rows(spark, table)
    heads = feed_heads(spark, table)

    # Batches 1-3 are three days old, but batch 3 holds shard 1's head: 1 and 2 go.
    done = retain(spark, table, consumers=[], max_age=timedelta(days=1))
    assert (done.removed_batches, done.horizon, done.oldest_batch, done.newest_batch) == (
        2,
        2,
        3,
        5,
    )
    assert (done.held_for_head, done.head_shard) == (1, 1)
    assert (done.held_for_consumers, done.slowest_consumer) == (0, None)
    assert batches(spark, table) == [3, 4, 5] and feed_horizon(spark, table) == 2
    assert rows(spark, table) == [r for r in before if r[2] >= 3], "whole batches, nothing else"
    assert feed_heads(spark, table) == heads and next_batch(spark, table) == 6

    # Shard 1 writes again, so its old head may go; keep_last keeps whole batches.
    land(spark, table, [(1, 11, 0)])
    assert retain(spark, table, consumers=[], max_age=86_400).removed_batches == 1
    done = retain(spark, table, consumers=[], keep_last=4)  # shard 0's newest 4: batches 4-5
    assert (done.removed_batches, done.horizon) == (0, 3)
    done = retain(spark, table, consumers=[], keep_last=1, max_age=timedelta(days=1))
    assert (done.removed_batches, done.horizon) == (0, 3), "an event either rule keeps is kept"
    done = retain(spark, table, consumers=[], keep_last=1)
    assert (done.removed_batches, done.horizon, done.head_shard) == (1, 4, None)
    assert batches(spark, table) == [5, 6]

    # A consumer's cursor holds (an output not built yet holds everything) until overridden.
    out = f"{SCHEMA}.ret_policy_out"
    spark.sql(f"drop table if exists {out}")
    done = retain(spark, table, consumers=[out], keep_last=0)
    assert (done.removed_batches, done.held_for_consumers, done.slowest_consumer) == (0, 0, None)
    land(spark, table, [(0, 12, 0), (1, 13, 0)])
    done = retain(spark, table, consumers=[out], keep_last=0)
    assert (done.removed_batches, done.held_for_consumers, done.slowest_consumer) == (0, 2, out)
    frame = spark.createDataFrame(
        [(0, ulid(1, 0, 1), 5)], "shard_id int, ulid binary, changefeed_feed_batch bigint"
    )
    write_batch(spark, out, frame)
    assert consumed_batch(spark, out) == 5
    done = retain(spark, table, consumers=[out], keep_last=0)
    assert (done.removed_batches, done.horizon, done.held_for_consumers) == (1, 5, 1)
    check_cursor(spark, table, 5, out)
    done = retain(spark, table, consumers=[out], keep_last=0, override_consumers=True)
    assert (done.removed_batches, done.horizon, batches(spark, table)) == (1, 6, [7])
    with pytest.raises(
        FellBehindRetention, match=r"up to batch 5, but .* every batch up to 6 .*--full-refresh"
    ):
        check_cursor(spark, table, 5, out)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, r"needs a policy: max_age .*keep_last"),
        ({"keep_last": -1}, r"keep_last must be an integer, 0 or more, got -1"),
        ({"max_age": "7d"}, r"max_age must be a timedelta or a number of seconds"),
        ({"keep_last": 1, "consumers": "a.b"}, r"consumers must be a list of the output tables"),
        (
            {"keep_last": 1, "override_consumers": "yes"},
            r"override_consumers must be true or false",
        ),
    ],
)
def test_arguments_are_checked_first(arguments: dict[str, Any], message: str) -> None:
    arguments = {"consumers": [], **arguments}
    with pytest.raises(ValueError, match=message):
        retain(None, f"{SCHEMA}.ret_not_touched", **arguments)


def test_the_cli_retains_a_spark_feed_and_keeps_what_a_consumer_has_not_read(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``changefeed retention --spark-table`` in process, on this module's session
    (``--spark existing``): refused without the consumers or with bad input, then the
    consumer's cursor holds until overridden."""
    table, out, plain = (f"{SCHEMA}.ret_cli", f"{SCHEMA}.ret_cli_out", f"{SCHEMA}.ret_cli_plain")
    spark.sql(f"create database if not exists {SCHEMA}")
    for name in (table, out, plain):
        spark.sql(f"drop table if exists {name}")
    for n in range(1, 4):
        land(spark, table, [(0, n, 10)])  # ten days old: docs' --max-age 7d removes them
    frame = spark.createDataFrame(
        [(0, ulid(1, 0, 1), 1)], "shard_id int, ulid binary, changefeed_feed_batch bigint"
    )
    write_batch(spark, out, frame)  # a consumer that has read batch 1
    spark.sql(f"create table {plain} (a int) using parquet")

    def cli(*args: str) -> tuple[int, str, str]:
        code = main(["retention", "--spark", "existing", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    refused = [
        ((), r"which tables consume .*--consumer schema\.table .*--no-consumers"),
        (("--max-age", "7x", "--no-consumers"), r"--max-age '7x' is not an age"),
        (("--connection", "postgresql://x@y/z", "--no-consumers"),
         r"--connection and --spark-table do not go together"),
        (("--no-consumers", "--consumer", out), r"--no-consumers says the feed has no consumer"),
    ]  # fmt: skip
    for extra, message in refused:
        code, printed, err = cli("--spark-table", table, "--keep-last", "0", *extra)
        assert (code, printed) == (1, ""), (extra, err)
        assert re.search(r"^changefeed retention: error: " + message, err), (extra, err)
    not_feeds = [(f"{SCHEMA}.ret_cli_none", "there is no table"),
                 (plain, "is not a Spark feed table: it has no column shard_id")]  # fmt: skip
    for missing, message in not_feeds:
        code, _, err = cli("--spark-table", missing, "--keep-last", "0", "--no-consumers")
        assert code == 1 and message in err, err
    code, _, err = cli("--feed", "shop.orders", "--consumer", out, "--keep-last", "0")
    assert code == 1 and "--consumer name the consumers of a Spark feed table" in err, err
    assert batches(spark, table) == [1, 2, 3], "nothing removed by a refused run"

    # The documented command, on this module's tables and session.
    argv = shlex.split(sample("operations-retention-spark").replace("\\\n", " "))
    assert argv[:4] == ["changefeed", "retention", "--spark-table", "landing.orders_feed"]
    argv = [table if a == "landing.orders_feed" else out if a == "analytics.orders_current"
            else a for a in argv[4:]]  # fmt: skip
    assert argv[-2:] == ["--warehouse", "spark-warehouse"]
    code, printed, err = cli("--spark-table", table, *argv[:-2])
    assert code == 0, err
    assert printed == (
        f"{table}: removed 1 batch(es); keeps batches 2 to 3 (horizon 1); kept 1 more for "
        f"consumer {out}, which has not read them (--override-consumers removes them)\n"
    )
    documented = sample("operations-retention-spark-output").strip()
    documented = documented.replace("landing.orders_feed", table)
    documented = documented.replace("analytics.orders_current", out)
    assert re.sub(r"\d+", "N", printed.strip()) == re.sub(r"\d+", "N", documented)
    code, printed, err = cli("--spark-table", table, "--keep-last", "0", "--consumer", out,
                             "--override-consumers", "--json")  # fmt: skip
    assert code == 0, err
    (done,) = json.loads(printed)
    assert (done["removed_batches"], done["horizon"], done["oldest_batch"]) == (1, 2, 3)
    assert (done["held_for_head"], done["head_shard"]) == (0, None)
    assert batches(spark, table) == [3] and feed_horizon(spark, table) == 2


class _KilledAfter:
    """A Spark session whose run dies after ``drops`` partition drops, like a SIGKILL."""

    def __init__(self, spark: Any, drops: int) -> None:
        self._spark, self._left = spark, drops

    def sql(self, text: str) -> Any:
        if "drop if exists partition" in text:
            if self._left == 0:
                raise KeyboardInterrupt("killed")
            self._left -= 1
        return self._spark.sql(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)


def test_a_killed_run_leaves_a_contiguous_feed(spark: Any) -> None:
    table = f"{SCHEMA}.ret_killed"
    spark.sql(f"drop table if exists {table}")
    for n in range(1, 6):
        land(spark, table, [(0, 2 * n, 3), (1, 2 * n + 1, 3)])
    before = rows(spark, table)
    with pytest.raises(KeyboardInterrupt):
        retain(_KilledAfter(spark, 2), table, consumers=[], keep_last=0)
    assert batches(spark, table) == [3, 4, 5] and feed_horizon(spark, table) == 2
    assert rows(spark, table) == [r for r in before if r[2] >= 3]

    # Killed after the metastore dropped a partition but before its files were deleted:
    # the directory is not a partition, so it is not read and not a batch number.
    location = spark.sql(f"describe formatted {table}").collect()
    path = next(str(r[1]) for r in location if str(r[0]).strip() == "Location")
    spark.sql("select 0 as shard_id, X'FF' as ulid, cast(99 as bigint) as order_id").write.parquet(
        path.rstrip("/") + "/changefeed_batch=1", mode="overwrite"
    )
    assert rows(spark, table) == [r for r in before if r[2] >= 3]
    assert feed_horizon(spark, table) == 2 and next_batch(spark, table) == 6

    done = retain(spark, table, consumers=[], keep_last=0)  # the re-run finishes the job
    assert (done.removed_batches, done.horizon, batches(spark, table)) == (2, 4, [5])


@pytest.fixture(scope="module")
def project(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbtHarness]:
    """A dbt project with three consumers of ret_feed (feed_cursor, feed_events, a current
    state) and a fourth not built yet; the external consumer table in the feed's meta."""
    root = package_project(tmp_path_factory.mktemp("ret") / "project", "changefeed_ret", {
        "sources.yml": SOURCES, "ret_cursor.sql": CURSOR, "ret_events.sql": EVENTS,
        "ret_late.sql": CURSOR, "ret_state.sql": STATE,
    })  # fmt: skip
    spark.sql(f"create database if not exists {SCHEMA}")
    for table in ("ret_feed", "ret_cursor", "ret_events", "ret_late", "ret_external",
                  "ret_state", "ret_state__changefeed_cursor"):  # fmt: skip
        spark.sql(f"drop table if exists {SCHEMA}.{table}")
    yield DbtHarness(tmp_path_factory.mktemp("ret-dbt"), spark=lambda: spark, project_dir=root)


def run(harness: DbtHarness, *args: str) -> None:
    """``dbt run``; a failed model raises DbtError with its message."""
    harness.invoke(["run", *args], "spark")


def retention(harness: DbtHarness, **args: Any) -> str:
    args = {"relation": FEED, **args}
    logged = harness.run_operation("changefeed.apply_retention", args, "spark")
    (line,) = [m for m in logged if FEED in m]
    return line


@pytest.mark.slow  # 12-20 s alone: left to make test, out of the edit loop
def test_dbt_retention_keeps_consumers_exactly_once(spark: Any, project: DbtHarness) -> None:
    for n in range(1, 4):
        land(spark, FEED, [(0, 10 * n, 2), (1, 10 * n + 1, 2)])
    run(project, "--select", "ret_cursor", "ret_events", "ret_state")
    for n in range(4, 6):
        land(spark, FEED, [(0, 10 * n, 2), (1, 10 * n + 1, 2)])
    run(project, "--select", "ret_cursor")  # ret_cursor at batch 5, ret_events, ret_state at 3
    assert consumed_batch(spark, f"{SCHEMA}.ret_state") == 3, "the state's cursor table"
    external = spark.createDataFrame(
        [(0, ulid(1, 0, 1), 5)], "shard_id int, ulid binary, changefeed_feed_batch bigint"
    )
    write_batch(spark, EXTERNAL, external)
    everything = [(s, o) for s, o, _ in rows(spark, FEED)]

    # ret_late is a consumer of the feed that has not run yet: it keeps the whole feed.
    # (The documented call: every event is two days old, so the policy would remove 1-4.)
    line = retention(project, **documented_retention(sample("spark-retention-dbt")))
    assert "removed 0 batch(es); keeps batches 1 to 5 (horizon 0)" in line
    assert "kept 4 more for consumer ret_late" in line
    run(project, "--select", "ret_late")
    line = retention(project, keep_last=0)
    assert "removed 3 batch(es); keeps batches 4 to 5 (horizon 3)" in line
    assert "kept 1 more for consumer ret_events, which has not read them" in line
    assert batches(spark, FEED) == [4, 5]

    land(spark, FEED, [(0, 60, 0), (1, 61, 0)])
    run(project, "--select", "ret_cursor", "ret_events", "ret_late")
    everything = sorted([*everything, (0, 60), (1, 61)])
    for consumer in ("ret_cursor", "ret_events", "ret_late"):
        assert consumed(spark, f"{SCHEMA}.{consumer}") == everything, consumer

    # Overridden: the consumers at batch 6 fall behind a horizon of 7, and say so.
    for n in range(7, 9):
        land(spark, FEED, [(0, 10 * n, 0), (1, 10 * n + 1, 0)])
    line = retention(project, keep_last=0, override_consumers=True)
    assert "removed 4 batch(es); keeps batches 8 to 8 (horizon 7)" in line
    with pytest.raises(DbtError) as failed:
        run(project, "--select", "ret_cursor", "ret_events")
    for consumer in ("ret_cursor", "ret_events"):
        expected = documented_behind(sample("spark-retention-behind"), consumer)
        assert expected in " ".join(str(failed.value).split()), consumer
    run(project, "--full-refresh", "--select", "ret_cursor", "ret_events")
    for consumer in ("ret_cursor", "ret_events"):
        assert consumed(spark, f"{SCHEMA}.{consumer}") == [(0, 80), (1, 81)], consumer


def test_dbt_operation_refuses_what_it_cannot_account_for(spark: Any, project: DbtHarness) -> None:
    other = f"{SCHEMA}.ret_unknown"
    spark.sql(f"drop table if exists {other}")
    land(spark, other, [(0, 1, 2)])
    land(spark, other, [(0, 2, 2)])
    cases = [
        (
            {"relation": other, "keep_last": 0},
            r"is not a model or source of this project.*override_consumers: true",
        ),
        ({"relation": FEED}, r"needs a policy: max_age_seconds .*keep_last"),
        (
            {"relation": FEED, "keep_last": 0, "shard": 0},
            r"removes whole batches.*shard must be left out",
        ),
        ({"relation": FEED, "max_age_seconds": "7d"}, r"max_age_seconds must be a whole number"),
        ({"relation": f"{SCHEMA}.ret_missing", "keep_last": 0}, r"ret_missing does not exist"),
    ]
    for args, message in cases:
        with pytest.raises(DbtError, match=message):
            project.run_operation("changefeed.apply_retention", args, target="spark")
    overridden = {"relation": other, "keep_last": 0, "override_consumers": True}
    logged = project.run_operation("changefeed.apply_retention", overridden, "spark")
    assert any("removed 1 batch(es); keeps batches 2 to 2 (horizon 1)" in m for m in logged)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_delta_and_iceberg_remove_whole_batches_in_one_delete(spark: Any, fmt: str) -> None:
    """The same rule on a table format with transactions: one delete of the oldest batches."""
    if "Delta" not in (spark.conf.get("spark.sql.extensions", "") or ""):
        unavailable("Delta Lake and Iceberg", "the shared Spark session started without them")
    previous = spark.conf.get("spark.sql.defaultCatalog")
    if fmt == "iceberg":  # dbt-spark's and this module's names have no catalog part
        spark.conf.set("spark.sql.defaultCatalog", ICEBERG_CATALOG)
    table = f"{SCHEMA}.ret_{fmt}"
    try:
        spark.sql(f"create database if not exists {SCHEMA}")
        spark.sql(f"drop table if exists {table}")
        spark.sql(
            f"create table {table} (shard_id int, ulid binary, order_id bigint, "
            f"changefeed_batch bigint) using {fmt} partitioned by (changefeed_batch)"
        )
        values = [(1, 0, 1), (1, 1, 2), (2, 0, 3), (3, 0, 4), (3, 1, 5)]
        rows_sql = ", ".join(f"({s}, X'{ulid(o, s, o).hex()}', {o}, {b})" for b, s, o in values)
        spark.sql(f"insert into {table} values {rows_sql}")
        done = retain(spark, table, consumers=[], keep_last=0)
        assert (done.removed_batches, done.horizon, done.oldest_batch) == (2, 2, 3)
        assert feed_horizon(spark, table) == 2
        kept = spark.sql(f"select order_id, changefeed_batch from {table}").collect()
        assert sorted((r[0], r[1]) for r in kept) == [(4, 3), (5, 3)]
    finally:
        spark.sql(f"drop table if exists {table}")
        spark.conf.set("spark.sql.defaultCatalog", previous)
