"""Benchmark: landing a PostgreSQL feed into Spark, and consuming it with dbt-spark.

In one run, on the embedded PostgreSQL and a local[2] Spark session:

A landing of 1 000 events runs first, because the first Python data source job of a
Spark session pays for starting its Python workers. Then, per table format (parquet,
Delta Lake and Iceberg; ``--formats``), each with PostgreSQL feeds of its own:

1. **Landing throughput**: ``--events`` events (default 100 000) on 4 shards are written
   to a blocking feed, then ``changefeed.spark.landing.land`` lands them (with payload)
   in one batch, into a table of the format; events/s of that run.
2. **Consumer cost vs feed size**: a dbt-spark consumer model of the format, written with
   the package's macros (``feed_safe_point``, ``feed_cursor``, ``feed_batch``; the
   structure of ``integration_tests/models/spark/cf_orders_consumer.sql``), reads a
   landed feed. After its first run has consumed the feed, ``--new`` events (default
   10 000) are written to PostgreSQL and landed, and the consumer's incremental ``dbt
   run`` is timed. This is done over the 100 000-event feed of step 1 and over a feed of
   ``--big`` events (default 10 000 000). The big feed's history is synthesized in Spark
   in the feed format (ULIDs of 2020, in batches of ``--history-batch`` events, default
   100 000, the size of the small feed's one batch), because writing and landing 10 M
   events through PostgreSQL would take most of the run; its new events are landed from
   PostgreSQL like the small one's. Next to each dbt run: a direct Spark read of the
   same new events from the landed table (the batch), the cost floor.

The bar (issue #5): the consumer's run over the big feed takes at most 1.5x its run over
the small one, in every format.

Prints a markdown table; ``--write-docs`` puts it into the "Spark landing and consumers"
section of docs/performance.md. Timings, not assertions. Usage::

    .venv/bin/python benchmarks/spark_consume.py [--events 100000] [--new 10000]
        [--big 10000000] [--history-batch 100000] [--formats parquet,delta,iceberg]
        [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from _perfdoc import write_section
from _scratch import scratch_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/support/dbt_harness.py runs the dbt macros in-process

from tests.support.dbt_spark import current_catalog  # noqa: E402  (dbt-spark names no catalog)

DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN spark-consume (written by benchmarks/spark_consume.py) -->"
END = "<!-- END spark-consume -->"
SHARDS = 4
SCHEMA = "cf_dbtkit"  # the dbt harness's target schema

FORMATS = ("parquet", "delta", "iceberg")

#: The consumer's write per format: parquet overwrites its new partitions; Delta and
#: Iceberg append in one transaction (the cheapest of the strategies docs/spark.md lists).
STRATEGY = {
    "parquet": "incremental_strategy='insert_overwrite', partition_by=['changefeed_batch']",
    "delta": "incremental_strategy='append', partition_by=['changefeed_batch']",
    "iceberg": "incremental_strategy='append', partition_by=['changefeed_batch']",
}

CONSUMER = """\
{{{{ config(materialized='incremental', file_format='{fmt}', {strategy}) }}}}
select e.shard_id, e.ulid, e.id, e.payload.v as v, e.changefeed_batch as changefeed_feed_batch,
       {{{{ changefeed.feed_batch() }}}} as changefeed_batch
from {{{{ source('bench', '{feed}') }}}} as e
where {{{{ changefeed.feed_safe_point(source('bench', '{feed}'), 'e') }}}}
{{% if is_incremental() %}}
  and {{{{ changefeed.feed_cursor('e') }}}}
{{% endif %}}
"""


def feed_name(size: str, fmt: str) -> str:
    return f"{size}_feed_{fmt}"


def sources(formats: tuple[str, ...]) -> str:
    tables = "".join(f"      - name: {feed_name(size, fmt)}\n"
                     for fmt in formats for size in ("small", "big"))  # fmt: skip
    return f"version: 2\nsources:\n  - name: bench\n    schema: {SCHEMA}\n    tables:\n{tables}"


def project(workdir: Path, formats: tuple[str, ...]) -> Path:
    """A dbt project with one consumer model per feed and format."""
    from tests.support.dbt_harness import package_project

    models = {
        f"consume_{feed_name(size, fmt)}.sql": CONSUMER.format(
            fmt=fmt, strategy=STRATEGY[fmt], feed=feed_name(size, fmt)
        )
        for fmt in formats
        for size in ("small", "big")
    }
    return package_project(workdir / "bench_project", "changefeed_bench",
                           {"sources.yml": sources(formats), **models})  # fmt: skip


def table_of(fmt: str, name: str) -> str:
    """Iceberg tables live in the Iceberg catalog (dbt reaches them as the current one)."""
    from changefeed.local.jars import ICEBERG_CATALOG

    return f"{ICEBERG_CATALOG}.{SCHEMA}.{name}" if fmt == "iceberg" else f"{SCHEMA}.{name}"


def write_events(uri: str, feed: str, start: int, count: int, per_tx: int = 10_000) -> None:
    """``count`` events with ids ``start..`` over the shards, ``per_tx`` per transaction."""
    from tests.support.spark_source import write_many_blocking

    per_shard = count // SHARDS
    for shard in range(SHARDS):
        first = start + shard * per_shard
        write_many_blocking(uri, feed, shard, first, per_shard, per_tx)


def synthesize_history(spark: Any, table: str, rows: int, per_batch: int, fmt: str) -> None:
    """``rows`` events in the feed format, ``per_batch`` per batch (from 1), with ULIDs of
    2020 (below any ULID PostgreSQL allocates now) rising with the id, so every shard's
    batches are monotonic (F3), ids from 10^9 up."""
    spark.sql(
        f"create table {table} (shard_id int, ulid binary, id bigint, "
        f"payload struct<id: bigint, v: string>, changefeed_batch bigint) "
        f"using {fmt} partitioned by (changefeed_batch)"
    )
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    spark.sql(
        f"insert into {table} "
        f"select cast(id % {SHARDS} as int), "
        f"unhex(concat('0170000000000000', lpad(hex(id), 16, '0'))), "
        f"id + 1000000000, named_struct('id', id + 1000000000, 'v', concat('h', id)), "
        f"cast(id div {per_batch} + 1 as bigint) from range({rows})"
    )


def timed(action: Any) -> tuple[float, Any]:
    started = time.monotonic()
    result = action()
    return time.monotonic() - started, result


def consumer_cost(
    spark: Any, dbt: Any, pg_uri: str, feeds: dict[str, str], fmt: str, args: Any
) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """Step 2 for one table format: the small and the big feed, each landed or synthesized
    in ``fmt``, a first consumer run, new events landed, the timed incremental run."""
    from changefeed.spark.landing import land

    results: list[tuple[str, str]] = []
    timings: dict[str, float] = {}
    small, big = table_of(fmt, feed_name("small", fmt)), table_of(fmt, feed_name("big", fmt))
    options = {"connection": pg_uri, "feed": feeds["small"], "payload": "true"}
    seconds, landed = timed(lambda: land(spark, options, small, table_format=fmt))
    print(f"{fmt}: {landed.summary()}", flush=True)
    timings["land_first"] = seconds
    results.append((f"{fmt}: landing {landed.events:,} events (payload, 4 shards, one run)",
                     f"{seconds:.1f} s = {landed.events / seconds:,.0f} events/s"))  # fmt: skip
    seconds, _ = timed(lambda: synthesize_history(spark, big, args.big, args.history_batch, fmt))
    print(f"{fmt}: synthesized {args.big:,} events in {seconds:.1f} s", flush=True)
    for size, table, history in (("small", small, args.events), ("big", big, args.big)):
        model = f"consume_{feed_name(size, fmt)}"
        output = table_of(fmt, model)
        with current_catalog(spark, fmt):
            seconds, _ = timed(lambda m=model: dbt.invoke(["run", "--select", m], "spark"))
        print(f"{model}: first run over {history:,} events in {seconds:.1f} s", flush=True)
        first = int(spark.sql(f"select count(*) from {output}").first()[0])
        assert first == history, (model, first, history)
        write_events(pg_uri, feeds[size], 5_000_000_000, args.new, per_tx=1_000)
        land_options = {"connection": pg_uri, "feed": feeds[size], "payload": "true"}
        land_seconds, landed = timed(lambda t=table, o=land_options: land(spark, o, t))
        print(f"{fmt}: {landed.summary()}", flush=True)
        with current_catalog(spark, fmt):
            run_seconds, _ = timed(lambda m=model: dbt.invoke(["run", "--select", m], "spark"))
        timings[f"land_{size}"], timings[f"run_{size}"] = land_seconds, run_seconds
        consumed = spark.sql(f"select count(*) from {output} where changefeed_batch = 2")
        new_rows = int(consumed.first()[0])
        query = f"select count(*), max(ulid) from {table} where changefeed_batch = {landed.batch}"
        direct_seconds, direct = timed(lambda q=query: spark.sql(q).first())
        assert new_rows == args.new == landed.events == direct[0], (new_rows, landed.events)
        results.append((f"{fmt}: {args.new:,} new events over a {history:,}-event feed: landing",
                        f"{land_seconds:.1f} s"))  # fmt: skip
        results.append((f"... consumer `dbt run` (incremental, {new_rows:,} rows out)",
                        f"**{run_seconds:.1f} s**"))  # fmt: skip
        results.append(("... direct Spark read of the new batch", f"{direct_seconds:.1f} s"))
        print(f"{model}: {new_rows:,} new events in {run_seconds:.1f} s (direct read "
              f"{direct_seconds:.1f} s)", flush=True)  # fmt: skip
    return results, timings


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--history-batch", type=int, default=100_000)
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help="comma-separated table formats (default: all three)")  # fmt: skip
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown formats {unknown}; choose from {', '.join(FORMATS)}")

    from tests.support import spark_source as kit
    from tests.support.dbt_harness import DbtHarness

    from changefeed.local.embedded_postgres import start
    from changefeed.local.spark import local_spark_session
    from changefeed.spark.landing import land

    workdir = scratch_dir("cf-bench-consume-")
    pg = start()
    lakehouse = any(fmt != "parquet" for fmt in formats)
    spark = local_spark_session("changefeed-bench-consume", warehouse_dir=workdir / "wh",
                                lakehouse=lakehouse or None)  # fmt: skip
    spark.sql(f"create database if not exists {SCHEMA}")
    if "iceberg" in formats:
        from changefeed.local.jars import ICEBERG_CATALOG

        spark.sql(f"create namespace if not exists {ICEBERG_CATALOG}.{SCHEMA}")
    dbt = DbtHarness(workdir / "dbt", postgres_uri=lambda: pg.uri, spark=lambda: spark,
                     project_dir=project(workdir, formats))  # fmt: skip

    def new_feed() -> str:
        return str(kit.create_feed(dbt, pg.uri, "blocking", "id bigint primary key, v text",
                                   schema="bench"))  # fmt: skip

    results: list[tuple[str, str]] = []
    # 0. the first Python data source job of a session starts Spark's Python workers
    warmup = new_feed()
    write_events(pg.uri, warmup, 1, 1_000)
    warm = {"connection": pg.uri, "feed": warmup, "payload": "true"}
    seconds, _ = timed(lambda: land(spark, warm, f"{SCHEMA}.warmup_feed"))
    results.append(("first landing of a fresh Spark session (1,000 events; starts the Python "
                    "workers)", f"{seconds:.1f} s"))  # fmt: skip

    # 1. one PostgreSQL feed per format and size, so each format lands the same events
    timings: dict[str, dict[str, float]] = {}
    for fmt in formats:
        feeds = {"small": new_feed(), "big": new_feed()}
        seconds, _ = timed(lambda f=feeds["small"]: write_events(pg.uri, f, 1, args.events))
        print(f"{fmt}: wrote {args.events:,} events to PostgreSQL in {seconds:.1f} s", flush=True)
        rows, timings[fmt] = consumer_cost(spark, dbt, pg.uri, feeds, fmt, args)
        results += rows

    batches = -(-args.big // args.history_batch)
    ratios = {fmt: t["run_big"] / t["run_small"] for fmt, t in timings.items()}
    load = os.getloadavg()[0]
    verdict = ", ".join(
        f"{fmt} {ratio:.2f}x ({'met' if ratio <= 1.5 else 'missed'})"
        for fmt, ratio in ratios.items()
    )
    lines = [
        "## Spark landing and consumers",
        "",
        f"`benchmarks/spark_consume.py` (one run; {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load:.1f} at the end; embedded PostgreSQL 16, Spark local[2]; "
        f"formats: {', '.join(formats)}).",
        "",
        "| measurement | result |",
        "|---|---|",
        *[f"| {what} | {result} |" for what, result in results],
        "",
        f"Per format, the big feed is {args.big:,} events: its history synthesized in the "
        f"format in {batches} batches of {args.history_batch:,}, then the landed batch of "
        f"new events. The consumer's incremental run over the {args.big // args.events}x "
        f"larger feed, against its run over the small feed, for the same {args.new:,} new "
        f"events (the bar: at most 1.5x): **{verdict}**. The run reads no more than its new "
        "batches: `feed_safe_point` and `feed_cursor` are literals (parquet: the feed's and "
        "the output's partition lists in the metastore; Delta and Iceberg: `min`/`max` of "
        "`changefeed_batch`, answered from file statistics), so Spark prunes the feed to "
        "the new batches. The consumers write with `insert_overwrite` on parquet and "
        "`append` on Delta and Iceberg. A landing reads its cursor (each shard's head) "
        "from the landed table's newest batches backwards until every shard is found, plus "
        "a fixed cost per run (Spark jobs, Python workers) that dominates small batches. "
        "Wall times on a shared 2-core machine vary between runs with the load average "
        "(compare the rows of one run).",
    ]
    section = "\n".join(lines)
    print("\n" + section)
    if args.write_docs:
        write_section(DOC, BEGIN, END, section)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
