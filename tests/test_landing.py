"""changefeed.spark.landing.land and ``changefeed land``: incremental runs, and kill-and-rerun.

The kill test runs the landing in separate processes (the CLI and this file's
``__main__`` runner) that share a Derby metastore and warehouse, kills them with SIGKILL
at three points, re-runs them, and compares every table with an uninterrupted landing.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.doc_blocks import parse_blocks, sample
from tests.support.real_parts import unavailable

from changefeed.cli import main
from changefeed.client import PostgresFeed
from changefeed.spark.feedtable import BATCH_COLUMN, OPERATION_COLUMN, retain
from changefeed.spark.landing import ChangefeedSourceError, land

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def test_incremental_runs(spark: Any, pg_uri: str, dbt: Any) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 30, 10)
    options = kit.options(pg_uri, feed, payload="true", pageSize=7)
    table = "landing_tests.incremental"

    first = land(spark, options, table)
    assert (first.batch, first.events) == (1, 30)
    assert land(spark, options, table).batch is None  # nothing new: no batch, no partition

    kit.write_many_blocking(pg_uri, feed, 0, 31, 5, 5)
    kit.write_many_blocking(pg_uri, feed, 3, 100, 4, 2)  # a new shard
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"delete from {feed} where id = 100")
    second = land(spark, options, table)
    assert (second.batch, second.events) == (2, 9)

    landed = spark.table(table)
    assert landed.columns == ["shard_id", "ulid", "id", "payload", OPERATION_COLUMN, BATCH_COLUMN]
    partitions = [r[0] for r in spark.sql(f"show partitions {table}").collect()]
    assert partitions == [f"{BATCH_COLUMN}=1", f"{BATCH_COLUMN}=2"]
    assert kit.rows_of(landed, "shard_id", "ulid", "id") == kit.feed_rows(pg_uri, feed)
    by_id = {r.id: r for r in landed.collect()}
    assert by_id[100].payload is None and by_id[101].payload.v == "v101"
    # what the feed knows of each change: the row is gone, or it exists (insert or update)
    operations = {r.id: r[OPERATION_COLUMN] for r in landed.collect()}
    assert operations == {i: "delete" if i == 100 else "upsert" for i in operations}
    assert (by_id[1][BATCH_COLUMN], by_id[31][BATCH_COLUMN]) == (1, 2)
    # The table's committed max(ulid) per shard is the next run's cursor.
    heads = {r[0]: bytes(r[1]) for r in spark.sql(
        f"select shard_id, max(ulid) from {table} group by shard_id").collect()}  # fmt: skip
    assert sorted(heads) == [0, 3]
    assert land(spark, options, table).cursors == heads


def test_a_table_landed_before_the_operation_column_lands_on_in_its_shape(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    """A table created by an earlier version (no changefeed_operation) keeps its columns,
    and a feed landed without payload writes the column as null: it knows keys only."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 4, 4)
    old = "landing_tests.before_operations"
    spark.sql("create database if not exists landing_tests")
    spark.sql(f"drop table if exists {old}")
    spark.sql(
        f"create table {old} (shard_id int, ulid binary, id bigint, "
        f"payload struct<id: bigint, v: string>, {BATCH_COLUMN} bigint) using parquet "
        f"partitioned by ({BATCH_COLUMN})"
    )
    assert land(spark, kit.options(pg_uri, feed, payload="true"), old).events == 4
    landed = spark.table(old)
    assert OPERATION_COLUMN not in landed.columns
    assert kit.rows_of(landed, "shard_id", "ulid", "id") == kit.feed_rows(pg_uri, feed)

    keys = "landing_tests.keys_only_operations"
    spark.sql(f"drop table if exists {keys}")
    assert land(spark, kit.options(pg_uri, feed), keys).events == 4
    assert [r[0] for r in spark.table(keys).select(OPERATION_COLUMN).collect()] == [None] * 4


def test_landing_refuses_what_it_cannot_do_safely(spark: Any, pg_uri: str, dbt: Any) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 3, 3)
    with pytest.raises(ChangefeedSourceError, match="cannot start at 'now'"):
        land(spark, kit.options(pg_uri, feed, startingPosition="now"), "landing_tests.now")
    with pytest.raises(ChangefeedSourceError, match="sets startingOffsets and endingOffsets"):
        land(spark, kit.options(pg_uri, feed, endingOffsets="{}"), "landing_tests.fixed")
    land(spark, kit.options(pg_uri, feed), "landing_tests.mismatch")
    with pytest.raises(ChangefeedSourceError, match="landed without payloads, the landing "
                       "now has them"):  # fmt: skip
        land(spark, kit.options(pg_uri, feed, payload="true"), "landing_tests.mismatch")


def test_a_changed_source_stops_the_landing_naming_each_change_and_the_way_on(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    """A change the table cannot follow (here a parquet table's column widened, beside
    an added and a dropped one it could follow) stops the landing before anything is
    written, named; the way on the error names, a new table filled by a snapshot, holds
    every row with the source's columns as they are now (docs/spark-source.md, "When the
    source's columns change"; tests/test_landing_evolution.py has the changes a table
    follows)."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text, n int")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 4, 2)
    options, table = kit.options(pg_uri, feed, payload="true"), "landing_tests.evolving"
    assert land(spark, options, table).events == 4
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"alter table {feed} add column note text, drop column v, "
                     "alter column n type bigint")  # fmt: skip
        conn.execute(f"update {feed} set note = 'n' || id")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 5, "note": "n5"}, {"id": 6, "note": "n6"}],
                       ["id"])  # fmt: skip
    with pytest.raises(ChangefeedSourceError) as refused:
        land(spark, options, table)
    message = str(refused.value)
    assert "source column n is bigint now, int in the table (a parquet table cannot widen" in (
        message
    )
    assert "note" not in message and "source column v" not in message, message
    new_table = f"{table}_v2"
    assert f"changefeed snapshot --feed {feed} --table {new_table})" in message
    assert [r[0] for r in spark.sql(f"show partitions {table}").collect()] == [
        f"{BATCH_COLUMN}=1"
    ], "nothing written"
    # The documented way on: its snapshot command, in this process on this session.
    snapshot, *rest = sample("spark-source-new-columns").replace("\\\n", " ").splitlines()
    words = shlex.split(snapshot)
    assert words[:2] == ["changefeed", "snapshot"] and words[-1].endswith("_v2"), words
    names = {"$CHANGEFEED_CONNECTION": pg_uri, "shop.orders": feed, words[-1]: new_table}
    assert main([names.get(w, w) for w in words[1:]] + ["--spark", "existing"]) == 0
    assert rest[-1].startswith("dbt run --full-refresh --select ")
    rows = {r.id: r.payload.asDict() for r in spark.table(new_table).collect()}
    assert rows == {i: {"id": i, "n": None, "note": f"n{i}"} for i in range(1, 7)}


def test_retention_keeps_what_a_landing_has_not_landed_and_refuses_one_it_passed(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    """Protocol 8.1 for a landing: it registers its landed position (under the table's
    name) after each commit, so retention removes only what the table holds; after an
    override removed events it has not landed, the next run fails naming the re-snapshot,
    although no event is left after its cursor (the probe alone would find nothing new)."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 10, 5)
    options, table = kit.options(pg_uri, feed), "landing_tests.retained"
    client = PostgresFeed(feed)
    assert land(spark, options, table).events == 10
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert client.consumers(conn) == [(table, 0, kit.safe_point(pg_uri, feed, 0))]
        kit.write_many_blocking(pg_uri, feed, 0, 11, 4, 2)
        kit.write_many_blocking(pg_uri, feed, 1, 100, 3, 3)  # a shard the landing has not seen
        removed = {r.shard_id: r.removed for r in client.retain(conn, keep_last=0)}
        # Shard 0: only the landed events; shard 1: none (registered nowhere there yet).
        assert removed == {0: 10, 1: 0}
    second = land(spark, options, table)
    assert (second.batch, second.events) == (2, 7)
    landed = kit.rows_of(spark.table(table), "shard_id", "ulid", "id")
    assert [r[2] for r in landed] == [*range(1, 15), 100, 101, 102]
    assert set(kit.feed_rows(pg_uri, feed)) <= set(landed)  # what is left was landed too
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert [c[:2] for c in client.consumers(conn)] == [(table, 0), (table, 1)]
        assert land(spark, options, table).batch is None  # caught up: every shard registered
        kit.write_many_blocking(pg_uri, feed, 0, 20, 3, 3)
        removed = {r.shard_id: r.removed for r in
                   client.retain(conn, keep_last=0, override_consumers=True)}  # fmt: skip
        assert removed == {0: 7, 1: 3}
    with pytest.raises(ChangefeedSourceError) as behind:
        land(spark, options, table)
    message = str(behind.value)
    assert f"landing {table} fell behind retention on feed {feed} shard 0:" in message
    assert "Re-snapshot" in message and "forget_consumer" in message
    partitions = [r[0] for r in spark.sql(f"show partitions {table}").collect()]
    assert partitions == [f"{BATCH_COLUMN}=1", f"{BATCH_COLUMN}=2"]  # nothing landed


def test_retention_of_the_landed_table_keeps_the_landing_exactly_once(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    """Protocol 11.7 for a landing: retention of the landed table keeps each shard's newest
    batch, whose head is the landing's cursor, so across retention every event is landed
    exactly once, also for a shard idle since the first batch."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    options, table = kit.options(pg_uri, feed), "landing_tests.spark_retained"
    kit.write_many_blocking(pg_uri, feed, 1, 100, 2, 2)  # shard 1 writes in batch 1 only
    for start in (1, 4):
        kit.write_many_blocking(pg_uri, feed, 0, start, 3, 3)
        land(spark, options, table)
    kit.write_many_blocking(pg_uri, feed, 0, 7, 3, 3)
    seen = kit.rows_of(spark.table(table), "shard_id", "ulid", "id")
    done = retain(spark, table, consumers=[], keep_last=0)
    assert (done.removed_batches, done.head_shard, done.held_for_head) == (0, 1, 1)

    kit.write_many_blocking(pg_uri, feed, 1, 102, 1, 1)
    kit.write_many_blocking(pg_uri, feed, 0, 10, 3, 3)
    assert land(spark, options, table).events == 7
    seen += kit.rows_of(spark.table(table), "shard_id", "ulid", "id")
    done = retain(spark, table, consumers=[], keep_last=0)
    assert (done.removed_batches, done.horizon) == (2, 2)
    kit.write_many_blocking(pg_uri, feed, 0, 13, 2, 2)
    assert land(spark, options, table).events == 2
    kept = kit.rows_of(spark.table(table), "shard_id", "ulid", "id")
    assert len(set(kept)) == len(kept)
    assert [r[2] for r in kept] == [7, 8, 9, 10, 11, 12, 13, 14, 102]
    assert sorted(set(seen) | set(kept)) == kit.feed_rows(pg_uri, feed)


def test_a_landing_registers_under_the_consumer_option(spark: Any, pg_uri: str, dbt: Any) -> None:
    feed = kit.create_feed(dbt, pg_uri, "outbox", "id bigint primary key, v text")
    kit.write_outbox(pg_uri, feed, 2, [{"id": 1, "v": "a"}], ["id"])
    options = kit.options(pg_uri, feed, consumer="orders landing")
    assert land(spark, options, "landing_tests.named").events == 1
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        assert PostgresFeed(feed).consumers(conn) == [
            ("orders landing", 2, kit.safe_point(pg_uri, feed, 2))
        ]


DOC = REPO / "docs" / "spark-source.md"


def test_the_docs_examples_run(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python sample of docs/spark-source.md, in order (feed renamed to
    cf_docs_spark.orders, paths under tmp_path); the shell samples through the parser."""
    import shlex

    from changefeed.cli import build_parser
    from changefeed.cli.land import source_options

    # The unmarked ones: a block marked <!-- sample: ... --> runs in its own test.
    blocks = [b.text for b in parse_blocks("docs/spark-source.md")
              if b.info == "python" and not b.id]  # fmt: skip
    assert len(blocks) == 4
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("create schema if not exists cf_docs_spark")
        conn.execute("drop table if exists cf_docs_spark.orders")
        conn.execute("create table cf_docs_spark.orders (order_id bigint primary key, note text)")
    dbt.run_operation("changefeed.teardown_feed", {"relation": "cf_docs_spark.orders"},
                      target="postgres")  # fmt: skip
    dbt.run_operation("changefeed.setup_feed", {"relation": "cf_docs_spark.orders",
                      "mode": "blocking"}, target="postgres")  # fmt: skip
    rows = [{"order_id": i, "note": f"n{i}"} for i in range(1, 6)]
    kit.write_blocking(pg_uri, "cf_docs_spark.orders", 0, rows, ["order_id"])

    namespace: dict[str, Any] = {"spark": spark, "uri": pg_uri}
    for block in blocks:
        code = block.replace("shop.", "cf_docs_spark.").replace("/data/", f"{tmp_path}/")
        code = code.replace("landing.", "cf_docs_landing.")
        exec(compile(code, str(DOC), "exec"), namespace)
    assert namespace["events"].count() == 5
    assert kit.rows_of(namespace["orders"], "order_id", "note") == [
        (i, f"n{i}") for i in range(1, 6)
    ]
    assert spark.read.parquet(f"{tmp_path}/orders_events").count() == 5
    assert (namespace["result"].batch, namespace["result"].events) == (1, 5)

    # The unmarked shell blocks: those marked <!-- sample: ... --> run in their own tests.
    shell = [b.text for b in parse_blocks("docs/spark-source.md") if b.info == "sh" and not b.id]
    commands = [c for block in shell for c in block.replace("\\\n", " ").splitlines() if c]
    assert len(commands) == 2
    for command in commands:
        argv = shlex.split(command)
        assert argv[:2] == ["changefeed", "land"]
        options = source_options(build_parser().parse_args(argv[1:]))
        assert options["feed"] in ("shop.orders", "dbo.orders")

    # The first command, run for real in this process (--spark existing: this session).
    from changefeed.cli import main

    argv = shlex.split(commands[0])[1:]
    argv[argv.index("--connection") + 1] = pg_uri
    argv[argv.index("--feed") + 1] = "cf_docs_spark.orders"
    argv[argv.index("--table") + 1] = "cf_docs_landing.cli_orders"
    capsys.readouterr()
    assert main([*argv, "--spark", "existing"]) == 0
    assert "cf_docs_landing.cli_orders: batch 1, 5 events from 1 shard" in capsys.readouterr().out
    argv[argv.index("--feed") + 1] = "cf_docs_spark.nothing"
    assert main([*argv, "--spark", "existing"]) == 1
    error = capsys.readouterr().err
    assert "changefeed land: error: unknown feed 'cf_docs_spark.nothing'" in error
    assert "Traceback" not in error


# -- kill and re-run ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lakehouse(spark: Any) -> Any:
    """The shared session, with Delta and Iceberg (their jars from ``make jars``)."""
    from changefeed.local import jars

    try:
        jars.lakehouse_jars()
    except jars.LakehouseJarsMissing as exc:
        unavailable("Delta Lake and Iceberg", str(exc))
    return spark


@pytest.mark.parametrize(
    ("fmt", "table"), [("delta", "landing_tests.lake_delta"),
                       ("iceberg", "iceberg.landing_tests.lake_iceberg")],
)  # fmt: skip
def test_landing_into_delta_and_iceberg(lakehouse: Any, pg_uri: str, dbt: Any, fmt: str,
                                        table: str) -> None:  # fmt: skip
    """A cold run creates the table in its format; warm runs of one Landing append a batch
    each (one transaction, no partition list); a run that dies right after its commit
    and a fresh landing that re-reads the table's heads land every event exactly once.
    The source's smallint, which Iceberg stores as int, is accepted by the cold runs."""
    from changefeed.spark.feedtable import table_format
    from changefeed.spark.landing import Landing

    spark = lakehouse
    feed = kit.create_feed(dbt, pg_uri, "blocking",
                           "id bigint primary key, v text, region smallint default 3")  # fmt: skip
    kit.write_many_blocking(pg_uri, feed, 0, 1, 30, 10)
    options = kit.options(pg_uri, feed, payload="true", pageSize=7)
    with pytest.raises(ChangefeedSourceError, match="not one of parquet, delta, iceberg"):
        land(spark, options, table, table_format="orc")

    landing = Landing(spark, options, table, table_format=fmt)
    try:
        assert (landing.run().batch, table_format(spark, table)) == (1, fmt)
        kit.write_many_blocking(pg_uri, feed, 1, 100, 12, 4)
        assert landing.run().events == 12  # warm: from what its own commit left
        kit.write_many_blocking(pg_uri, feed, 2, 200, 6, 3)

        def die(at: str, details: Any) -> None:
            if at == "committed":
                raise Died(at)

        with pytest.raises(Died):
            landing.run(on_stage=die)
    finally:
        landing.close()
    kit.write_many_blocking(pg_uri, feed, 0, 300, 5, 5)
    again = land(spark, options, table)  # cold: heads and batch from the table
    assert (again.batch, again.events) == (4, 5)
    assert land(spark, options, table).batch is None

    landed = spark.table(table)
    assert kit.rows_of(landed, "shard_id", "ulid", "id") == kit.feed_rows(pg_uri, feed)
    assert {r[0] for r in landed.select("payload.region").collect()} == {3}
    batches = {r[0]: r[1] for r in spark.sql(
        f"select {BATCH_COLUMN}, count(*) from {table} group by 1").collect()}  # fmt: skip
    assert batches == {1: 30, 2: 12, 3: 6, 4: 5}
    other = "parquet" if fmt != "parquet" else "delta"
    with pytest.raises(ChangefeedSourceError, match=f"is a {fmt} table, not {other}"):
        land(spark, options, table, table_format=other)


def test_a_table_format_that_cannot_live_in_the_catalog_is_refused(
    lakehouse: Any, pg_uri: str, dbt: Any
) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    options = kit.options(pg_uri, feed)
    with pytest.raises(ChangefeedSourceError, match="Iceberg table is named with its catalog"):
        land(lakehouse, options, "landing_tests.not_here", table_format="iceberg")
    with pytest.raises(ChangefeedSourceError, match="holds Iceberg tables"):
        land(lakehouse, options, "iceberg.landing_tests.not_here", table_format="delta")
    assert not lakehouse.catalog.tableExists("landing_tests.not_here")


def _runner(config: dict[str, Any], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """This file's ``__main__`` in a process group of its own (it may SIGKILL the group)."""
    return subprocess.run(
        [sys.executable, __file__, json.dumps(config)],
        capture_output=True, text=True, timeout=timeout, cwd=config["warehouse"],
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'python'}"}, start_new_session=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_landing_killed_during_the_write_reruns_to_the_same_table(
    pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    """Batch 1 lands in two tables; more events are written; the reference lands batch 2;
    the other table's batch 2 is SIGKILLed (driver, JVM and Python workers: the whole
    process group) while Spark's tasks write its staging directory. A new process re-runs
    both landings: the tables are identical, row for row and batch for batch. Two Spark
    processes share one Derby metastore and warehouse (a catalog that outlives them)."""
    feed = kit.create_feed(dbt, pg_uri, "outbox", "id bigint primary key, v text")
    kit.write_outbox(pg_uri, feed, 0, [{"id": i, "v": f"a{i}"} for i in range(60)], ["id"])
    kit.write_outbox(pg_uri, feed, 1, [{"id": i, "v": f"a{i}"} for i in range(100, 120)], ["id"])
    reference, killed = "landed.reference", "landed.killed"
    config: dict[str, Any] = {"warehouse": str(tmp_path), "uri": pg_uri, "feed": feed,
                              "page_size": 10}  # fmt: skip

    both = [reference, killed]
    first = _runner({**config, "tables": both, "then_write": True, "tables_after_write": both,
                     "kill_in_write": killed})  # fmt: skip
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert "killing during the write of landed.killed" in first.stdout
    assert "landed.killed: batch 2" not in first.stdout  # it never finished

    dump = tmp_path / "dump.json"
    rerun = _runner({**config, "tables": [reference, killed], "dump": str(dump)})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    result = json.loads(dump.read_text())

    one, two = f"{BATCH_COLUMN}=1", f"{BATCH_COLUMN}=2"
    # Nothing of the killed batch was visible; the re-run wrote it.
    assert result["partitions_before"] == {reference: [one, two], killed: [one]}
    assert "landed.killed: batch 2, 300 events" in rerun.stdout
    expected = result["rows"][reference]
    assert len(expected) == 80 + 300
    assert [r[4] for r in expected].count(2) == 300
    events = sorted((r[0], bytes.fromhex(r[1]), r[2]) for r in expected)
    assert events == kit.feed_rows(pg_uri, feed)
    assert result["rows"][killed] == expected
    assert result["partitions"][killed] == [one, two]


class Died(BaseException):
    """Stands for the process dying at a stage (in-process: nothing after it runs)."""


@pytest.mark.parametrize("stage", ["planned", "committed"])
def test_a_landing_that_dies_before_or_after_its_commit_reruns_cleanly(
    spark: Any, pg_uri: str, dbt: Any, stage: str
) -> None:
    """The other two moments, in-process: right after planning (nothing written) and
    right after the partition was registered (committed, the caller never heard)."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 20, 5)
    options = kit.options(pg_uri, feed, payload="true")
    reference, victim = f"landing_tests.ref_{stage}", f"landing_tests.died_{stage}"
    for table in (reference, victim):
        assert land(spark, options, table).batch == 1
    kit.write_many_blocking(pg_uri, feed, 2, 100, 12, 4)
    assert land(spark, options, reference).batch == 2

    def die(at: str, details: Any) -> None:
        if at == stage:
            raise Died(at)

    with pytest.raises(Died):
        land(spark, options, victim, on_stage=die)
    again = land(spark, options, victim)
    assert again.batch == (2 if stage == "planned" else None)
    columns = ("shard_id", "ulid", "id", "payload", BATCH_COLUMN)
    assert kit.rows_of(spark.table(victim), *columns) == kit.rows_of(
        spark.table(reference), *columns
    )


def _write_batch_two(uri: str, feed: str) -> None:
    for start in range(1000, 1100, 10):  # 300 events in 30 transactions on 3 shards
        for shard in (0, 1, 2):
            rows = [{"id": shard * 10_000 + i, "v": "b"} for i in range(start, start + 10)]
            kit.write_outbox(uri, feed, shard, rows, ["id"])


def _main(config: dict[str, Any]) -> None:
    """A landing process of the kill test: land ``tables``; with ``then_write`` write the
    second batch's events; land ``tables_after_write``, and SIGKILL the process group as
    soon as the write of ``kill_in_write`` has a staging directory; with ``dump``, write
    every table's partitions and rows to that file."""
    import argparse

    from changefeed.cli.land import spark_session

    spark = spark_session(argparse.Namespace(spark="local", warehouse=config["warehouse"], conf=[]))
    options = kit.options(config["uri"], config["feed"], payload="true",
                          pageSize=config["page_size"])  # fmt: skip

    def partitions(table: str) -> list[str]:
        if not spark.catalog.tableExists(table):
            return []
        return sorted(r[0] for r in spark.sql(f"show partitions {table}").collect())

    before = {table: partitions(table) for table in config["tables"]}

    def watch(table: str) -> None:
        database, name = table.split(".")
        location = Path(config["warehouse"]) / f"{database}.db" / name
        while True:
            if location.exists() and any(
                p.name.startswith(".spark-staging") for p in location.iterdir()
            ):
                print(f"killing during the write of {table}", flush=True)
                os.killpg(os.getpgid(0), signal.SIGKILL)
            time.sleep(0.005)

    def on_stage(stage: str, details: Any) -> None:
        if stage == "planned" and details["table"] == config.get("kill_in_write"):
            threading.Thread(target=watch, args=(details["table"],), daemon=True).start()

    for table in config["tables"]:
        print(land(spark, options, table).summary(), flush=True)
    if config.get("then_write"):
        _write_batch_two(config["uri"], config["feed"])
    for table in config.get("tables_after_write", []):
        print(land(spark, options, table, on_stage=on_stage).summary(), flush=True)
    if config.get("dump"):
        rows = {}
        for table in config["tables"]:
            collected = spark.sql(
                f"select shard_id, hex(ulid), id, to_json(payload), {BATCH_COLUMN} from {table}"
            ).collect()
            rows[table] = sorted([r[0], r[1].lower(), r[2], r[3], r[4]] for r in collected)
        dump = {"partitions_before": before, "rows": rows,
                "partitions": {t: partitions(t) for t in config["tables"]}}  # fmt: skip
        Path(config["dump"]).write_text(json.dumps(dump))


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
