"""Benchmark: a snapshot of a large PostgreSQL table into Spark, next to a plain read of
the same table from Python, in the same run.

On the embedded PostgreSQL and a local[2] Spark session:

1. a table of ``--rows`` rows (default 10 000 000; ``id bigint`` key, a text, an integer
   and a timestamp column) with a blocking feed, analyzed;
2. **plain reads** of the whole table on one connection from Python: ``COPY ... TO
   STDOUT`` into nothing (the floor of any reader), a server-side cursor fetching
   Python rows (what a Python reader that looks at the values pays), and a read into
   Arrow with ADBC's binary ``COPY`` (the driver the snapshot's tasks read chunks with);
3. a warm-up landing (a fresh Spark session's first Python job starts its workers), then
   **the snapshot**: ``request_snapshot`` and one ``land`` run that lands every row into a
   parquet table, in chunks of ``--chunk-rows`` (one Spark task each), its batches
   written as parquet files by the tasks (the default for a local parquet table);
4. **the same snapshot through Spark's writer** (a second request of the same feed,
   landed into a second table with ``Landing(snapshot_writer="spark")``: what Delta,
   Iceberg and tables on other filesystems use);
5. **Spark alone**: the landed rows read back and written into a new parquet table of the
   same layout: the cost of Spark's writer on this machine without the database or
   Python, for reference.

The bar (issue 12): snapshot rows/s at least half of the plain single-connection read.
Prints a markdown table; ``--write-docs`` puts it into the "Snapshot" section of
docs/performance.md. Timings, not assertions. Usage::

    .venv/bin/python benchmarks/snapshot.py [--rows 10000000] [--chunk-rows 1000000]
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

DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN snapshot (written by benchmarks/snapshot.py) -->"
END = "<!-- END snapshot -->"
COLUMNS = "id bigint primary key, v text not null, n integer not null, t timestamptz not null"


def plain_copy(uri: str, table: str) -> float:
    """Seconds to read the whole table with COPY TO STDOUT on one connection, discarding it."""
    import psycopg

    started = time.monotonic()
    with (
        psycopg.connect(uri) as conn,
        conn.cursor() as cur,
        cur.copy(f"copy (select * from {table}) to stdout") as copy,
    ):
        for _ in copy:
            pass
    return time.monotonic() - started


def plain_arrow(uri: str, table: str) -> tuple[float, int]:
    """Seconds to read the whole table into Arrow on one connection (ADBC's binary COPY,
    the driver a snapshot's tasks read with), discarding the batches."""
    import adbc_driver_postgresql.dbapi as adbc  # type: ignore[import-untyped,unused-ignore]

    started = time.monotonic()
    rows = 0
    with adbc.connect(uri) as conn, conn.cursor() as cur:
        cur.execute(f"select * from {table}")
        for batch in cur.fetch_record_batch():
            rows += batch.num_rows
    return time.monotonic() - started, rows


def plain_fetch(uri: str, table: str) -> tuple[float, int]:
    """Seconds to fetch the whole table as Python rows through a server-side cursor."""
    import psycopg

    started, rows = time.monotonic(), 0
    with psycopg.connect(uri) as conn, conn.cursor(name="bench") as cur:
        cur.itersize = 50_000
        cur.execute(f"select * from {table}")
        while batch := cur.fetchmany(50_000):
            rows += len(batch)
    return time.monotonic() - started, rows


def spark_floor(spark: Any, landed: str, copy: str) -> float:
    """Seconds for Spark alone to read the landed rows back and write them into a new
    parquet table of the same layout: no database, no Python worker. The snapshot writes
    the same rows through the same writer, so this is a reference for its cost."""
    spark.sql(f"create table {copy} using parquet partitioned by (changefeed_batch) "
              f"as select * from {landed} where false")  # fmt: skip
    started = time.monotonic()
    spark.table(landed).write.insertInto(copy)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    import psycopg
    from tests.support import spark_source as kit
    from tests.support.dbt_harness import DbtHarness

    from changefeed.local.embedded_postgres import start
    from changefeed.local.spark import local_spark_session
    from changefeed.spark.landing import Landing, land, request_snapshot

    workdir = scratch_dir("cf-bench-snapshot-")
    pg = start()
    spark = local_spark_session("changefeed-bench-snapshot", warehouse_dir=workdir / "wh")
    spark.sql("create database if not exists bench")
    dbt = DbtHarness(workdir / "dbt", postgres_uri=lambda: pg.uri, spark=lambda: spark)

    feed = kit.create_feed(dbt, pg.uri, "blocking", COLUMNS, schema="bench")
    warmup = kit.create_feed(dbt, pg.uri, "blocking", COLUMNS, schema="bench")
    started = time.monotonic()
    with psycopg.connect(pg.uri, autocommit=True) as conn:
        for name, rows in ((feed, args.rows), (warmup, 1_000)):
            conn.execute(
                f"insert into {name} select i, md5(i::text), i % 1000, "
                f"timestamptz '2024-01-01' + i * interval '1 second' "
                f"from generate_series(1, {rows}) as i"
            )
            conn.execute(f"vacuum analyze {name}")
    print(f"wrote {args.rows:,} rows in {time.monotonic() - started:.1f} s", flush=True)

    copy_seconds = plain_copy(pg.uri, feed)
    fetch_seconds, fetched = plain_fetch(pg.uri, feed)
    assert fetched == args.rows
    arrow_seconds, read = plain_arrow(pg.uri, feed)
    assert read == args.rows
    print(f"plain COPY {copy_seconds:.1f} s, plain fetch {fetch_seconds:.1f} s, "
          f"plain Arrow {arrow_seconds:.1f} s", flush=True)  # fmt: skip

    warm = {"connection": pg.uri, "feed": warmup, "payload": "true"}
    request_snapshot(warm)
    land(spark, warm, "bench.warmup", snapshot_chunk_rows=500)

    options = {"connection": pg.uri, "feed": feed, "payload": "true"}
    started = time.monotonic()
    request_snapshot(options)
    result = land(spark, options, "bench.snapshot", snapshot_chunk_rows=args.chunk_rows,
                  on_progress=lambda p: print(p.line(), flush=True))  # fmt: skip
    snapshot_seconds = time.monotonic() - started
    landed = spark.table("bench.snapshot").count()
    assert landed == args.rows, (landed, result)

    started = time.monotonic()
    request_snapshot(options)
    through_spark = Landing(
        spark, options, "bench.snapshot_spark",
        snapshot_chunk_rows=args.chunk_rows, snapshot_writer="spark",
    )  # fmt: skip
    try:
        through_spark.run(on_progress=lambda p: print(p.line(), flush=True))
    finally:
        through_spark.close()
    spark_seconds = time.monotonic() - started
    landed = spark.table("bench.snapshot_spark").count()
    assert landed == args.rows, landed
    floor_seconds = spark_floor(spark, "bench.snapshot", "bench.floor")

    load = os.getloadavg()
    rate = args.rows / snapshot_seconds
    copy_rate, fetch_rate = args.rows / copy_seconds, args.rows / fetch_seconds
    verdict = "met" if rate >= copy_rate / 2 else "NOT met"
    section = "\n".join([
        "### Snapshot",
        "",
        f"A snapshot of a {args.rows:,}-row table (`{COLUMNS}`) into a parquet landed table "
        f"(chunks of {args.chunk_rows:,} rows, one Spark task each, `local[2]`), next to a plain "
        "read of the same table from Python on one connection, in the same run "
        f"(`benchmarks/snapshot.py`; {platform.machine()}, {os.cpu_count()} cores, load "
        f"average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end, a shared machine).",
        "",
        "| read | seconds | rows/s |",
        "|---|---|---|",
        f"| plain `COPY ... TO STDOUT`, discarded (one connection) | {copy_seconds:.1f} | "
        f"{copy_rate:,.0f} |",
        f"| plain server-side cursor, Python rows (one connection) | {fetch_seconds:.1f} | "
        f"{fetch_rate:,.0f} |",
        f"| plain read into Arrow, ADBC binary COPY (one connection) | {arrow_seconds:.1f} | "
        f"{args.rows / arrow_seconds:,.0f} |",
        f"| **snapshot** (request, barrier, chunks, commit; batches written by the tasks) | "
        f"{snapshot_seconds:.1f} | **{rate:,.0f}** |",
        f"| the same snapshot through Spark's writer (`snapshot_writer=\"spark\"`) | "
        f"{spark_seconds:.1f} | {args.rows / spark_seconds:,.0f} |",
        f"| Spark alone: the landed rows read back and written to a new parquet table | "
        f"{floor_seconds:.1f} | {args.rows / floor_seconds:,.0f} |",
        "",
        f"Snapshot / plain COPY: **{rate / copy_rate:.2f}**; snapshot / plain fetch: "
        f"{rate / fetch_rate:.2f}. The bar (at least half of the plain single-connection read, "
        f"taken as the COPY, which reads at about the 1.6 to 1.9 M rows/s the issue gives for "
        f"a plain read on this machine; the Python-rows fetch here is slower): **{verdict}**. "
        f"Through Spark's writer the "
        f"same snapshot runs at {args.rows / spark_seconds / copy_rate:.2f} of the COPY "
        f"({snapshot_seconds / spark_seconds:.2f}x the time of the default path's "
        f"run, same run): Spark alone copying the landed rows (last row: a parquet read "
        f"instead of the database, no Python) runs at "
        f"{args.rows / floor_seconds / copy_rate:.2f} of the COPY, so Spark's writer is the "
        "limit of that path on these cores, and a local parquet table's snapshot skips it: "
        "its tasks write the Arrow batches they read to parquet files themselves "
        "(docs/snapshot.md, \"Performance\").",
    ])  # fmt: skip
    print(section, flush=True)
    if args.write_docs:
        write_section(DOC, BEGIN, END, section)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
