"""Batches written as parquet files by changefeed itself (a parquet landed table on the
local filesystem of a local Spark; ``changefeed.spark.landing._parquet_files``,
docs/protocol.md 12.3): a snapshot's, by its tasks, and a warm run's live events, by the
driver; on a real PostgreSQL and Spark:

* a warm run's live batch is one file pyarrow wrote, with no Spark job, and its rows
  equal those of the same events landed through Spark's writer;
* the files are pyarrow's (not Spark's writer's), and the rows equal those of the same
  snapshot landed through Spark's writer (``snapshot_writer="spark"``), column types of
  both read paths (ADBC's and the row path's) included;
* a landing that dies between moving a batch's directory into place and registering it
  (the commit point) leaves nothing visible, and its re-run replaces the directory;
* a landing process SIGKILLed while its tasks write a batch's files resumes to a table
  equal to the source, with no duplicate and no staging directory left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.dbt_harness import REPO_ROOT

from changefeed.spark.feedtable import BATCH_COLUMN, OPERATION_COLUMN
from changefeed.spark.landing import ChangefeedSourceError, Landing, request_snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.timeout(900)]

DATABASE = "snapshot_file_tests"
ROWS = 3000
CHUNK_ROWS = 300
BATCH_ROWS = 600
#: Every type ADBC reads straight into Arrow, and two it does not (numeric, jsonb: the
#: row path), so that both read paths feed the file writer.
COLUMNS = (
    "id bigint primary key, v text not null, n integer, s smallint, r real, "
    "f double precision, ok boolean, d date, ts timestamp, tz timestamptz, b bytea, "
    "c varchar(20), amount numeric(12,2), doc jsonb"
)
VALUES = (
    "i, 'v' || i, i % 7, (i % 300)::smallint, i / 3.0, i / 7.0, i % 2 = 0, "
    "date '2020-01-01' + i, timestamp '2021-02-03 04:05:06.789' + i * interval '1 minute', "
    "timestamptz '2021-02-03 04:05:06.789+02' + i * interval '1 second', "
    "decode(lpad(to_hex(i), 8, '0'), 'hex'), 'c' || i, i * 1.25, "
    "jsonb_build_object('i', i, 'even', i % 2 = 0)"
)


def _feed(dbt: Any, uri: str) -> str:
    feed = f"srcf.snapf_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("create schema if not exists srcf")
        conn.execute(f"create table {feed} ({COLUMNS})")
        conn.execute(f"insert into {feed} select {VALUES} from generate_series(1, {ROWS}) as i")
        conn.execute(f"update {feed} set n = null, amount = null, ts = null where id % 97 = 0")
    dbt.run_operation("changefeed.setup_feed", {"relation": feed, "mode": "blocking"},
                      target="postgres")  # fmt: skip
    return feed


def _landing(spark: Any, options: dict[str, str], table: str, **extra: Any) -> Landing:
    return Landing(spark, options, table, snapshot_chunk_rows=CHUNK_ROWS,
                   snapshot_batch_rows=BATCH_ROWS, **extra)  # fmt: skip


def _location(spark: Any, table: str) -> Path:
    for row in spark.sql(f"describe table extended {table}").collect():
        if row[0] == "Location":
            return Path(row[1].removeprefix("file:"))
    raise AssertionError(f"no location for {table}")


def _written_by(location: Path, batches: str = "*") -> set[str]:
    """Who wrote the parquet files of the table at ``location`` (of ``batches``' partitions)."""
    import pyarrow.parquet as pq

    return {
        str(pq.ParquetFile(path).metadata.created_by).split(" ")[0]
        for path in location.glob(f"{BATCH_COLUMN}={batches}/*.parquet")
    }


def _rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    """The landed rows by key: (key, payload as JSON), in key order."""
    got = spark.sql(f"select id, to_json(payload) from {table} order by id").collect()
    return [tuple(r) for r in got]


@pytest.fixture(scope="module")
def database(spark: Any) -> str:
    spark.sql(f"drop database if exists {DATABASE} cascade")
    spark.sql(f"create database {DATABASE}")
    return DATABASE


@pytest.mark.slow  # 12-20 s alone: left to make test, out of the edit loop
def test_a_local_parquet_snapshot_is_written_by_its_tasks_with_sparks_rows(
    spark: Any, pg_uri: str, dbt: Any, database: str
) -> None:
    tables = {}
    for writer in ("auto", "spark"):
        feed = _feed(dbt, pg_uri)
        options = kit.options(pg_uri, feed, payload="true")
        table = f"{database}.by_{writer}"
        request_snapshot(options)
        landing = _landing(spark, options, table, snapshot_writer=writer)
        try:
            landing.run()
        finally:
            landing.close()
        tables[writer] = table
    direct, through_spark = (_location(spark, tables[w]) for w in ("auto", "spark"))
    assert _written_by(direct) == {"parquet-cpp-arrow"}, "the tasks wrote the files"
    assert _written_by(through_spark) == {"parquet-mr"}, "Spark's writer wrote them"
    assert not list(direct.glob(".changefeed-snapshot-*")), "no staging directory is left"
    schema = {t: spark.table(t).schema for t in tables.values()}
    assert schema[tables["auto"]] == schema[tables["spark"]]
    rows = {w: _rows(spark, t) for w, t in tables.items()}
    assert len(rows["auto"]) == ROWS and rows["auto"] == rows["spark"]
    batches = spark.sql(f"show partitions {tables['auto']}").collect()
    assert len(batches) == ROWS // BATCH_ROWS, "one partition per batch of chunks"
    for table in tables.values():
        ulids = spark.sql(f"select count(distinct ulid) from {table}").first()[0]
        assert ulids == ROWS


def test_a_warm_runs_live_batch_is_a_file_the_driver_writes_with_sparks_rows(
    spark: Any, pg_uri: str, dbt: Any, database: str
) -> None:
    """A warm run's events (read on the driver) into a local parquet table: one file that
    pyarrow wrote and the partition registered, without a Spark job; the same rows, types
    and batches as through Spark's writer (``snapshot_writer="spark"``)."""
    feed = _feed(dbt, pg_uri)
    options = kit.options(pg_uri, feed, payload="true")
    kit.write_blocking(pg_uri, feed, 0, [{"id": i} for i in range(1, 301)], ["id"])
    tables, jobs = {}, {}
    landings = {w: Landing(spark, options, f"{database}.live_{w}", keep_connection=True,
                           snapshot_writer=w) for w in ("auto", "spark")}  # fmt: skip
    try:
        for landing in landings.values():
            assert landing.run().batch == 1  # cold: through Spark, as every first run
        kit.write_blocking(pg_uri, feed, 1, [{"id": i} for i in range(200, 501)], ["id"])
        with psycopg.connect(pg_uri, autocommit=True) as conn:  # these 21 events are deletes
            conn.execute(f"delete from {feed} where id between 480 and 500")
        for writer, landing in landings.items():
            group = f"warm-{writer}-{uuid.uuid4().hex[:6]}"
            spark.sparkContext.setJobGroup(group, "a warm landing run")
            try:
                result = landing.run()
            finally:
                spark.sparkContext.setJobGroup("", "")
            assert (result.batch, result.events) == (2, 301)
            jobs[writer] = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
            tables[writer] = landing.table.text
    finally:
        for landing in landings.values():
            landing.close()
    assert jobs["auto"] == [] and jobs["spark"], jobs  # no Spark job, against at least one
    direct, through_spark = (_location(spark, tables[w]) for w in ("auto", "spark"))
    assert _written_by(direct, "2") == {"parquet-cpp-arrow"}
    assert len(list((direct / f"{BATCH_COLUMN}=2").glob("*.parquet"))) == 1
    assert _written_by(through_spark, "2") == {"parquet-mr"}
    assert not list(direct.glob(".changefeed-snapshot-*")), "no staging directory is left"
    assert spark.table(tables["auto"]).schema == spark.table(tables["spark"]).schema
    select = (f"select shard_id, hex(ulid), id, to_json(payload), {OPERATION_COLUMN}, "
              f"{BATCH_COLUMN} from {{}} order by shard_id, ulid")  # fmt: skip
    rows = {w: [tuple(r) for r in spark.sql(select.format(t)).collect()]
            for w, t in tables.items()}  # fmt: skip
    assert len(rows["auto"]) == 601 and rows["auto"] == rows["spark"]
    events = sorted((s, bytes.fromhex(u), k) for s, u, k, _, _, _ in rows["auto"])
    assert events == kit.feed_rows(pg_uri, feed)
    operations = {(r[2], r[5]): r[4] for r in rows["auto"]}
    assert operations == {
        (k, b): "delete" if b == 2 and k >= 480 else "upsert" for k, b in operations
    }


def test_an_unknown_snapshot_writer_is_refused(spark: Any, pg_uri: str) -> None:
    with pytest.raises(ChangefeedSourceError, match="snapshot_writer must be one of 'auto', "
                       "'spark', got 'pyarrow'"):  # fmt: skip
        Landing(spark, kit.options(pg_uri, "srcf.any"), "x.y", snapshot_writer="pyarrow")


class Died(BaseException):
    """Stands for the process dying (in-process: nothing after it runs)."""


def test_a_batch_moved_into_place_but_not_registered_is_replaced(
    spark: Any, pg_uri: str, dbt: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = _feed(dbt, pg_uri)
    options = kit.options(pg_uri, feed, payload="true")
    table = f"{database}.unregistered"
    request_snapshot(options)
    registrations = []
    original = spark.sql

    def sql(query: str, *args: Any, **kwargs: Any) -> Any:
        if "add partition" in query and table.split(".")[1] in query:
            registrations.append(query)
            if len(registrations) == 2:
                raise Died(query)
        return original(query, *args, **kwargs)

    monkeypatch.setattr(spark, "sql", sql)
    landing = _landing(spark, options, table)
    with pytest.raises(Died):
        landing.run()
    landing.close()
    monkeypatch.undo()
    location = _location(spark, table)
    left = location / f"{BATCH_COLUMN}=2"
    assert any(left.glob("*.parquet")), "batch 2's directory was moved into place"
    assert spark.sql(f"select count(*) from {table}").first()[0] == BATCH_ROWS, (
        "only batch 1 is visible"
    )
    resumed = _landing(spark, options, table)
    try:
        resumed.run()
    finally:
        resumed.close()
    got = _rows(spark, table)
    assert len(got) == ROWS and len({r[0] for r in got}) == ROWS, "every key once"
    with psycopg.connect(pg_uri) as conn:
        keys = [r[0] for r in conn.execute(f"select id from {feed} order by id")]
    assert [r[0] for r in got] == keys


def _runner(config: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """This file's ``__main__`` in a process group of its own (it may SIGKILL the group)."""
    return subprocess.run(
        [sys.executable, __file__, json.dumps(config)],
        capture_output=True, text=True, timeout=600, cwd=config["warehouse"],
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'python'}"},
        start_new_session=True,
    )  # fmt: skip


@pytest.mark.slow
def test_a_snapshot_killed_while_its_tasks_write_files_resumes_exactly(
    pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    """Process 1 requests a snapshot and lands it; once its first batch is committed, it
    SIGKILLs its whole process group (driver, JVM, Python workers) as soon as a task has
    a file in the next batch's staging directory. Process 2 lands again: the snapshot
    resumes after the committed batch and the table equals the source."""
    feed = _feed(dbt, pg_uri)
    config = {"warehouse": str(tmp_path), "uri": pg_uri, "feed": feed,
              "table": "landed.snap"}  # fmt: skip
    first = _runner({**config, "request": True, "kill": True})
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert "killing while a task writes" in first.stdout, first.stdout
    second = _runner(config)
    assert second.returncode == 0, second.stderr[-3000:]
    result = json.loads(second.stdout.strip().splitlines()[-1])
    assert result["before"] == [f"{BATCH_COLUMN}=1"], "only the first batch had committed"
    assert result["staging"] == [], "the killed attempt's staging directory was removed"
    assert result["resumed_from_chunk"] == BATCH_ROWS // CHUNK_ROWS
    with psycopg.connect(pg_uri) as conn:
        keys = [r[0] for r in conn.execute(f"select id from {feed} order by id")]
    assert result["keys"] == keys, "every key once, none missing"
    assert result["finished"] is True


def _main(config: dict[str, Any]) -> None:
    import argparse

    from changefeed.cli.land import spark_session

    spark = spark_session(argparse.Namespace(spark="local", warehouse=config["warehouse"], conf=[]))
    spark.sql("create database if not exists landed")
    options = kit.options(config["uri"], config["feed"], payload="true")
    table = config["table"]
    location = Path(config["warehouse"]) / "landed.db" / "snap"

    def partitions() -> list[str]:
        if not spark.catalog.tableExists(table):
            return []
        return sorted(r[0] for r in spark.sql(f"show partitions {table}").collect())

    def watch() -> None:
        while True:
            for staging in location.glob(".changefeed-snapshot-*"):
                if any(staging.iterdir()):
                    print("killing while a task writes", staging.name, flush=True)
                    os.killpg(os.getpgid(0), signal.SIGKILL)
            time.sleep(0.002)

    seen: dict[str, Any] = {"before": partitions()}

    def on_stage(stage: str, details: Any) -> None:
        if stage != "snapshot_committed":
            return
        seen.setdefault("resumed_from_chunk", details["chunks"][0])
        if config.get("kill"):
            threading.Thread(target=watch, daemon=True).start()

    if config.get("request"):
        request_snapshot(options)
    landing = _landing(spark, options, table)
    try:
        landing.run(on_stage=on_stage)
    finally:
        landing.close()
    keys = [r[0] for r in spark.sql(f"select id from {table} order by id").collect()]
    with psycopg.connect(config["uri"]) as conn:
        finished = conn.execute(
            f"select bool_and(finished_at is not null) from {kit.obj(config['feed'], 'snapshot')}"
        ).fetchone()[0]
    seen.update(keys=keys, finished=finished,
                staging=[p.name for p in location.glob(".changefeed-snapshot-*")])  # fmt: skip
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
