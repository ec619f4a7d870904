"""Spark Connect on a standalone cluster (issue: run where teams run Spark): a master and
two workers started from PySpark's own jars (executors in JVMs and processes of their
own), and a Connect server started from the same jars whose driver runs on that cluster.
On a client session of it: the feed's batch read, the ULID UDFs, a streaming read resumed
from its checkpoint, and ``land()`` on parquet, Delta and Iceberg, cold and warm, then
again while a writer keeps writing, the parquet landing executing a snapshot; every table
equals the source, every live event landed once, and the tasks ran on both workers. Then
``changefeed land --spark existing`` with ``SPARK_REMOTE`` naming the server, and, once
the server has stopped, ``changefeed land --spark existing --conf spark.master=spark://...``
(a driver of its own on the cluster) land the feed too. One cluster and one server for all
of it (their JVMs cost starts of their own)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.support import spark_source as kit
from tests.support.real_parts import unavailable

# about 80 s (a cluster and a Connect server of its own): left to make test
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

TABLES = {
    "parquet": "connect_tests.t_parquet",
    "delta": "connect_tests.t_delta",
    "iceberg": "iceberg.connect_tests.t_iceberg",
}


def newest(rows: list[Any]) -> dict[int, Any]:
    """Per key, the payload of its newest landed event (in (ulid, shard) order)."""
    found: dict[int, tuple[bytes, int, Any]] = {}
    for row in rows:
        order = (bytes(row.ulid), row.shard_id)
        if row.id not in found or order > found[row.id][:2]:
            found[row.id] = (*order, row.payload.asDict() if row.payload is not None else None)
    return {key: value[2] for key, value in found.items()}


def test_connect_and_a_driver_of_its_own_on_a_standalone_cluster(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    try:
        import grpc  # noqa: F401
        from tests.support.spark_cluster import standalone_cluster
        from tests.support.spark_connect import connect_server, remote_session

        from changefeed import _jars

        _jars.lakehouse_jars()
    except (ImportError, _jars.LakehouseJarsMissing) as exc:
        unavailable("Spark Connect", f"{type(exc).__name__}: {exc}")
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": i, "v": f"v{i}"} for i in range(20)], ["id"])
    options = kit.options(pg_uri, feed, payload="true")
    with contextlib.ExitStack() as outer:
        (tmp_path / "cluster").mkdir()
        try:
            cluster = outer.enter_context(standalone_cluster(tmp_path / "cluster"))
        except RuntimeError as exc:
            unavailable("Spark cluster", str(exc))
        with contextlib.ExitStack() as stack:
            try:
                address = stack.enter_context(connect_server(tmp_path, cluster.url))
            except RuntimeError as exc:
                unavailable("Spark Connect", str(exc))
            remote = stack.enter_context(remote_session(address))
            _on_connect(remote, cluster, address, options, pg_uri, feed, dbt, tmp_path)
        _classic_driver(spark, cluster.url, pg_uri, feed, tmp_path)


def _on_connect(spark: Any, cluster: Any, address: str, options: dict[str, str], pg_uri: str,
                feed: str, dbt: Any, tmp_path: Path) -> None:  # fmt: skip
    from changefeed.spark import is_connect
    from changefeed.spark.landing import Landing, land
    from changefeed.spark.source import register

    assert is_connect(spark)
    register(spark)
    read = spark.read.format("changefeed").options(**options).load()
    assert kit.rows_of(read, "shard_id", "ulid", "id") == kit.feed_rows(pg_uri, feed)
    for fmt, table in TABLES.items():
        assert land(spark, options, table, table_format=fmt).events == 20, fmt
    _check_udfs(spark, TABLES["parquet"])
    _check_streaming(spark, options, pg_uri, feed, tmp_path)
    stop = threading.Event()

    def writer() -> None:
        key = 100
        while not stop.is_set():
            kit.write_blocking(pg_uri, feed, 0, [{"id": key, "v": "w"}, {"id": key % 20,
                               "v": f"u{key}"}], ["id"])  # fmt: skip
            key += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        # a snapshot into the parquet table (whose own files Connect rules out), under
        # writes; the other formats land under the same writes
        dbt.run_operation("changefeed.request_snapshot", {"relation": feed}, target="postgres")
        for fmt, table in TABLES.items():
            landing = Landing(spark, options, table)
            try:
                assert bool(landing.run().snapshots) == (fmt == "parquet"), fmt
                landing.run()  # warm
            finally:
                landing.close()
    finally:
        stop.set()
        thread.join(60)
    for fmt, table in TABLES.items():
        land(spark, options, table)  # everything written so far
        rows = spark.table(table).collect()
        live = sorted((r.shard_id, bytes(r.ulid), r.id) for r in rows
                      if r.changefeed_operation != "snapshot")  # fmt: skip
        assert live == kit.feed_rows(pg_uri, feed), fmt
        assert newest(rows) == _source(pg_uri, feed), fmt
    # `changefeed land` on the same server, by SPARK_REMOTE (--spark existing)
    table = "connect_tests.t_cli"
    env = {**os.environ, "SPARK_REMOTE": address}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    command = [sys.executable, "-m", "changefeed.cli", "land", "--connection", pg_uri,
               "--feed", feed, "--table", table, "--payload",
               "--spark", "existing"]  # fmt: skip
    landed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert landed.returncode == 0, landed.stderr[-3000:]
    rows = spark.table(table).collect()
    assert sorted((r.shard_id, bytes(r.ulid), r.id) for r in rows) == kit.feed_rows(pg_uri, feed)

    # the server's executors ran on both workers
    workers = cluster.state()["workers"]
    assert sorted(w["coresused"] for w in workers) == [1, 1], workers


def _classic_driver(local: Any, master: str, pg_uri: str, feed: str, tmp_path: Path) -> None:
    """`changefeed land` with a driver of its own on the cluster, its master by --conf."""
    cli = tmp_path / "cli"
    cli.mkdir()
    command = [sys.executable, "-m", "changefeed.cli", "land", "--connection", pg_uri,
               "--feed", feed, "--table", "cluster_cli.t", "--payload", "--spark", "existing",
               "--conf", f"spark.master={master}",
               "--conf", "spark.executor.memory=768m"]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONF_DIR", None)
    landed = subprocess.run(command, cwd=cli, env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert landed.returncode == 0, landed.stderr[-3000:]
    table = local.read.parquet(str(cli / "spark-warehouse" / "cluster_cli.db" / "t"))
    assert kit.rows_of(table, "shard_id", "ulid", "id") == kit.feed_rows(pg_uri, feed)


def _check_udfs(spark: Any, table: str) -> None:
    """The ULID UDFs, in SQL and as column functions, give what the scalar helpers give."""
    from changefeed.spark.udfs import register, ulid_timestamp_ms, ulid_to_string
    from changefeed.ulid import encode_one, timestamp_ms_one

    register(spark)
    rows = spark.sql(f"select ulid, ulid_to_string(ulid) as text, ulid_timestamp_ms(ulid) as ms "
                     f"from {table}").collect()  # fmt: skip
    assert len(rows) == 20
    for row in rows:
        assert (row.text, row.ms) == (
            encode_one(bytes(row.ulid)),
            timestamp_ms_one(bytes(row.ulid)),
        )
    columns = spark.table(table).select(
        ulid_to_string("ulid").alias("text"), ulid_timestamp_ms("ulid").alias("ms")
    )
    assert sorted(columns.collect()) == sorted((r.text, r.ms) for r in rows)


def _check_streaming(spark: Any, options: dict[str, str], uri: str, feed: str,
                     tmp_path: Path) -> None:  # fmt: skip
    """Two availableNow runs of a streaming read into parquet: together every event once."""
    out, checkpoint = tmp_path / "stream", tmp_path / "stream-checkpoint"

    def run() -> None:
        query = (spark.readStream.format("changefeed").options(**options).load()
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())  # fmt: skip
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    assert kit.rows_of(spark.read.parquet(str(out)), "shard_id", "ulid", "id") == kit.feed_rows(
        uri, feed
    )
    kit.write_blocking(uri, feed, 0, [{"id": 50, "v": "s"}, {"id": 3, "v": "s3"}], ["id"])
    run()
    assert kit.rows_of(spark.read.parquet(str(out)), "shard_id", "ulid", "id") == kit.feed_rows(
        uri, feed
    )


def _source(uri: str, feed: str) -> dict[int, dict[str, Any]]:
    import psycopg

    with psycopg.connect(uri) as conn:
        return {r[0]: {"id": r[0], "v": r[1]} for r in conn.execute(f"select id, v from {feed}")}
