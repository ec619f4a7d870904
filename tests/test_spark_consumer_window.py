"""A consumer's window (docs/protocol.md 11.3, 11.6) costs its new batches, not the feed.

The safe point is the feed's newest batch from its partition list, the cursor the feed
batch the consumer has consumed up to, read from its output's newest partition; both are
literal bounds on the feed's partition column. The plan tests count the partitions Spark
reads (the whole-table max(ulid) and the correlated cursor subquery read all of them);
the dbt runs cover the edge cases: a shard idle for several runs, an empty run, a filtering
consumer, debris of a killed run in the output, a missing column and a full refresh.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError, DbtHarness, package_project

from changefeed.local import catalog

# The tests build on the first one's batches, so the module is slow as a whole (about 18 s).
pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "cf_dbtkit"  # the harness's target schema: sources and models live there
FEED = f"{SCHEMA}.cost_feed"

CONSUMER = """\
{{ config(materialized='incremental', incremental_strategy='insert_overwrite',
          partition_by=['changefeed_batch'], file_format='parquet') }}
select e.shard_id, e.ulid, e.order_id, e.changefeed_batch as changefeed_feed_batch,
       {{ changefeed.feed_batch() }} as changefeed_batch
from {{ source('cost', 'cost_feed') }} as e
where {{ changefeed.feed_safe_point(source('cost', 'cost_feed'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
"""

FILTERED = """\
{{ config(materialized='incremental', incremental_strategy='insert_overwrite',
          partition_by=['changefeed_batch'], file_format='parquet') }}
{%- set output = this if is_incremental() else none %}
select e.*, {{ changefeed.feed_batch() }} as changefeed_batch
from {{ changefeed.feed_events(source('cost', 'cost_feed'), output) }} as e
where e.shard_id = 0
"""

NO_COLUMN = """\
{{ config(materialized='incremental', incremental_strategy='insert_overwrite',
          partition_by=['changefeed_batch'], file_format='parquet') }}
select e.shard_id, e.ulid, e.order_id, {{ changefeed.feed_batch() }} as changefeed_batch
from {{ source('cost', 'cost_feed') }} as e
where {{ changefeed.feed_safe_point(source('cost', 'cost_feed'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
"""


def u(ms: int, n: int) -> bytes:
    return ms.to_bytes(6, "big") + b"\x00\x09" + n.to_bytes(8, "big")


def land(spark: Any, events: list[tuple[int, int]]) -> int:
    """One batch of (shard, order_id) events; ULIDs from the order id (rising per shard)."""
    from changefeed.spark.feedtable import write_batch

    rows = [(shard, u(order_id, shard), order_id) for shard, order_id in events]
    frame = spark.createDataFrame(rows, "shard_id int, ulid binary, order_id bigint")
    return int(write_batch(spark, FEED, frame))


@pytest.fixture(scope="module")
def cost(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DbtHarness]:
    """A dbt project with three consumers of cost_feed, and the feed's first batch."""
    sources = (f"version: 2\nsources:\n  - name: cost\n    schema: {SCHEMA}\n"
               "    tables:\n      - name: cost_feed\n")  # fmt: skip
    above = tmp_path_factory.mktemp("cost")
    root = package_project(above / "project", "changefeed_cost", {
        "sources.yml": sources, "cost_consumer.sql": CONSUMER, "cost_filtered.sql": FILTERED,
        "cost_no_column.sql": NO_COLUMN,
    })  # fmt: skip
    # A shared catalog's directory above the project, as after `changefeed catalog init`
    # there: dbt's plugin would fail a Spark start without SPARK_CONF_DIR, but dbt run
    # in-process beside this session starts none, so its runs go on (issue 33).
    (above / catalog.DEFAULT_DIR).mkdir(parents=True)
    (above / catalog.DEFAULT_DIR / "catalog.json").write_text('{"warehouse": "/x", "port": 5}')
    spark.sql(f"create database if not exists {SCHEMA}")
    for table in ("cost_feed", "cost_consumer", "cost_filtered", "cost_no_column"):
        spark.sql(f"drop table if exists {SCHEMA}.{table}")
    assert land(spark, [(0, 1), (1, 2), (0, 3)]) == 1
    yield DbtHarness(
        tmp_path_factory.mktemp("cost-dbt"), spark=lambda: spark, project_dir=root
    )


def run(harness: DbtHarness, *args: str) -> None:
    result = harness.invoke(["run", *args], "spark")
    if not result.success:
        results = getattr(result.result, "results", None) or []
        messages = [str(getattr(r, "message", r)) for r in results]
        raise DbtError(str(result.exception or "") + " ".join(messages))


def output(spark: Any, table: str) -> list[tuple[int, int, int, int]]:
    """(shard, order_id, feed batch, consumer batch) of every row, sorted."""
    spark.sql(f"refresh table {SCHEMA}.{table}")
    rows = spark.sql(
        f"select shard_id, order_id, changefeed_feed_batch, changefeed_batch from {SCHEMA}.{table}"
    ).collect()
    return sorted((r[0], r[1], r[2], r[3]) for r in rows)


def partitions_read(frame: Any) -> int:
    """Run ``frame`` and return how many table partitions its scans read."""
    frame.collect()
    plan = frame._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    total, stack = 0, [plan]
    while stack:
        node = stack.pop()
        metrics = node.metrics()
        if "Scan" in node.nodeName() and metrics.contains("numPartitions"):
            total += int(metrics.apply("numPartitions").value())
        children = node.children().iterator()
        while children.hasNext():
            stack.append(children.next())
    return total


def test_incremental_runs_read_only_the_new_batches(
    spark: Any, cost: DbtHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    run(cost, "--select", "cost_consumer", "cost_filtered")
    # what the plugin would have named, had this process not run Spark already
    assert catalog.found_above(cost.project_dir) is not None
    assert (cost.packages_dir / "changefeed" / "dbt_project.yml").is_file()
    assert output(spark, "cost_consumer") == [(0, 1, 1, 1), (0, 3, 1, 1), (1, 2, 1, 1)]

    # shard 1 is idle for three runs: neither lost nor re-read when it writes again
    for order_id in (4, 5, 6):
        land(spark, [(0, order_id)])
        run(cost, "--select", "cost_consumer", "cost_filtered")
    land(spark, [(1, 7), (0, 8)])
    run(cost, "--select", "cost_consumer", "cost_filtered")
    expected = [(0, 1, 1, 1), (0, 3, 1, 1), (0, 4, 2, 2), (0, 5, 3, 3), (0, 6, 4, 4),
                (0, 8, 5, 5), (1, 2, 1, 1), (1, 7, 5, 5)]  # fmt: skip
    assert output(spark, "cost_consumer") == expected
    assert output(spark, "cost_filtered") == [r for r in expected if r[0] == 0]

    # an empty run: no new batch, so no new partition and no row
    run(cost, "--select", "cost_consumer")
    assert output(spark, "cost_consumer") == expected

    # the compiled window: literal partition bounds, the cursor from the output
    compiled = (cost.target_path / "compiled").rglob("cost_consumer.sql")
    sql = " ".join(next(compiled).read_text().split())
    assert "(e.changefeed_batch <= 5)" in sql and "(e.changefeed_batch > 5)" in sql
    assert "select max(" not in sql, "nothing is computed over the feed or the output"


def test_consumer_window_reads_only_its_partitions(spark: Any, cost: DbtHarness) -> None:
    """The feed has batches 1-5 (the test above); a consumer at batch 3 reads 4 and 5."""
    spark.sql(f"drop table if exists {SCHEMA}.cost_window_out")
    spark.sql(
        f"create table {SCHEMA}.cost_window_out (shard_id int, ulid binary, "
        "changefeed_feed_batch bigint, changefeed_batch bigint) using parquet "
        "partitioned by (changefeed_batch)"
    )
    spark.sql(f"insert into {SCHEMA}.cost_window_out values (0, X'01', 1, 1), (0, X'02', 3, 2)")
    feed = f"api.Relation.create(schema='{SCHEMA}', identifier='cost_feed')"
    out = f"api.Relation.create(schema='{SCHEMA}', identifier='cost_window_out')"
    safe_point, cursor = cost.render_many(
        ["{{ changefeed.feed_safe_point(" + feed + ", 'e') }}",
         "{{ changefeed.feed_cursor('e', " + out + ") }}"], "spark")  # fmt: skip
    assert (safe_point, cursor) == ("(e.changefeed_batch <= 5)", "(e.changefeed_batch > 3)")
    window = spark.sql(f"select order_id from {FEED} as e where {safe_point} and {cursor}")
    assert partitions_read(window) == 2
    assert sorted(r[0] for r in window.collect()) == [6, 7, 8]


def test_debris_of_a_killed_run_is_neither_a_cursor_nor_a_batch(
    spark: Any, cost: DbtHarness
) -> None:
    """A killed run's unregistered partition directory (protocol 11.2) claims to have
    consumed batch 99; the cursor and the batch number come from registered partitions,
    so the re-run reads the new batch and replaces the directory."""
    location = spark.sql(f"describe formatted {SCHEMA}.cost_consumer").collect()
    path = next(str(r[1]) for r in location if str(r[0]).strip() == "Location")
    spark.sql(
        "select 0 as shard_id, X'FF' as ulid, cast(0 as bigint) as order_id, "
        "cast(99 as bigint) as changefeed_feed_batch"
    ).write.parquet(path.rstrip("/") + "/changefeed_batch=6", mode="overwrite")
    land(spark, [(1, 9)])
    run(cost, "--select", "cost_consumer")
    rows = output(spark, "cost_consumer")
    assert rows[-1] == (1, 9, 6, 6) and (0, 0, 99, 6) not in rows


def test_missing_cursor_column_is_a_clear_error(spark: Any, cost: DbtHarness) -> None:
    run(cost, "--select", "cost_no_column")
    with pytest.raises(DbtError, match=r"has no column changefeed_feed_batch.*--full-refresh"):
        run(cost, "--select", "cost_no_column")


def test_full_refresh_rebuilds_from_the_start(spark: Any, cost: DbtHarness) -> None:
    before = output(spark, "cost_consumer")
    run(cost, "--full-refresh", "--select", "cost_consumer")
    after = output(spark, "cost_consumer")
    assert {r[3] for r in after} == {1}, "one batch: everything up to the safe point"
    assert [r[:3] for r in after] == [r[:3] for r in before]
