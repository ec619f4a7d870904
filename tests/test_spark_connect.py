"""Spark Connect on a standalone cluster (issue: run where teams run Spark): a master and
two workers started from PySpark's own jars (executors in JVMs and processes of their
own), and a Connect server started from the same jars whose driver runs on that cluster.
On a client session of it: the feed's batch read, the ULID UDFs, a streaming read resumed
from its checkpoint, and ``land()`` on parquet, Delta and Iceberg, cold and warm, the
parquet landing executing a snapshot while a writer keeps writing; every table
equals the source, every live event landed once, and the tasks ran on both workers; a
landing service of two targets, and retention on parquet and Delta; ``changefeed land
--spark existing`` with ``SPARK_REMOTE`` naming the server. Then, once the server has
stopped, a shared catalog whose warehouse is on an S3-compatible object store (moto's
server on 127.0.0.1, the nodes holding its keys) and whose drivers run on the cluster, set
up as docs/deploying.md says: ``changefeed land`` run by ``spark-submit --master
spark://...``, a dbt ``method: session`` run with the master in its
``server_side_parameters``, and the Thrift server with dbt's ``method: thrift`` on it;
each model equals the source, and every table's files are in the bucket, none on the
local disk. One cluster for all of it (its JVMs cost starts of their own)."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import spark_source as kit
from tests.support.dbt_harness import package_project
from tests.support.doc_blocks import sample
from tests.support.real_parts import unavailable
from tests.support.shared_catalog import (
    PROFILE,
    landed_consumer,
    landed_source,
    process_env,
    shell,
)

# about 190 s alone (a cluster, a Connect server, a Thrift server, two drivers): make test
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
        from tests.support.node_python import node_python
        from tests.support.s3_server import credentials_env, s3_server
        from tests.support.spark_cluster import standalone_cluster
        from tests.support.spark_connect import connect_server, remote_session

        from changefeed.local import jars

        jars.lakehouse_jars()
        jars.s3a_connector()
    except (ImportError, jars.LakehouseJarsMissing) as exc:
        unavailable("Spark Connect", f"{type(exc).__name__}: {exc}")
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": i, "v": f"v{i}"} for i in range(20)], ["id"])
    options = kit.options(pg_uri, feed, payload="true")
    with contextlib.ExitStack() as outer:
        (tmp_path / "cluster").mkdir()
        server = outer.enter_context(s3_server(tmp_path, BUCKET))
        # the nodes' Python holds the wheel and its postgres extra only, as the page says;
        # the nodes have the object store's keys, as from a node's own set-up
        python = node_python(tmp_path)
        try:
            cluster = outer.enter_context(standalone_cluster(
                tmp_path / "cluster", node_env={**credentials_env(), "PYSPARK_PYTHON": python}
            ))  # fmt: skip
        except RuntimeError as exc:
            unavailable("Spark cluster", str(exc))
        with contextlib.ExitStack() as stack:
            try:
                address = stack.enter_context(connect_server(tmp_path, cluster.url, python))
            except RuntimeError as exc:
                unavailable("Spark Connect", str(exc))
            remote = stack.enter_context(remote_session(address))
            _on_connect(remote, cluster, address, options, pg_uri, feed, dbt, tmp_path)
        documented = {"server": sample("deploying-thrift-server"),
                      "profile": sample("deploying-thrift-profile"),
                      "object_store": sample("object-store-catalog"),
                      "spark_submit": sample("deploying-spark-submit")}  # fmt: skip
        _shared_catalog_on_the_cluster(cluster, server, python, documented, pg_uri, feed, dbt,
                                       tmp_path)  # fmt: skip


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
        # a snapshot into the parquet table (whose own files Connect rules out), then a
        # warm run, under writes
        dbt.run_operation("changefeed.request_snapshot", {"relation": feed}, target="postgres")
        landing = Landing(spark, options, TABLES["parquet"])
        try:
            assert landing.run().snapshots
            landing.run()
        finally:
            landing.close()
    finally:
        stop.set()
        thread.join(60)
    for fmt, table in TABLES.items():
        land(spark, options, table)  # everything written so far: warm runs, no snapshot
        rows = spark.table(table).collect()
        live = sorted((r.shard_id, bytes(r.ulid), r.id) for r in rows
                      if r.changefeed_operation != "snapshot")  # fmt: skip
        assert live == kit.feed_rows(pg_uri, feed), fmt
        assert newest(rows) == _source(pg_uri, feed), fmt
    _service_and_retention(spark, options, pg_uri, feed)
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


#: The dbt project of the cluster's shared catalog: a consumer and a current state run
#: through the Thrift server, a Delta current state by a ``method: session`` driver.
CLUSTER_SCHEMA = "cf_cluster"
BUCKET = "changefeed-test"
CLUSTER_MODELS = {
    "sources.yml": landed_source(CLUSTER_SCHEMA, "landed"),
    "orders_consumer.sql": landed_consumer("landed"),
    "orders_current.sql": """{{ config(materialized='changefeed_current_state',
    unique_key='id', file_format='parquet') }}
select e.shard_id, e.ulid, e.id, e.payload, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('landed', 'landed'), this) }} as e
""",
    "orders_current_delta.sql": """{{ config(materialized='changefeed_current_state',
    unique_key='id', file_format='delta') }}
select e.shard_id, e.ulid, e.id, e.payload, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('landed', 'landed'), this) }} as e
""",
}


def _shared_catalog_on_the_cluster(cluster: Any, server: Any, python: str,
                                   documented: dict[str, str], pg_uri: str, feed: str,
                                   dbt: Any, tmp_path: Path) -> None:  # fmt: skip
    """A shared catalog whose warehouse is on the object store and whose Spark drivers run
    on the cluster, set up by docs/deploying.md's block: `changefeed land` run by
    spark-submit on the master, dbt's `method: session` with it in server_side_parameters,
    and the Thrift server started as the page says, with dbt's `method: thrift` on it. Every table's
    files are in the bucket, none on the local disk."""
    from tests.support.s3_server import credentials_env, on_server
    from tests.support.spark_cluster import EXECUTOR_CONF, conf_args
    from tests.support.spark_thrift import DOC_MASTER, DOC_PORT, thrift_server

    from changefeed.local import catalog
    from changefeed.local.catalog_tables import NeedsSpark, feed_heads

    work = tmp_path / "shared"
    work.mkdir()
    # the drivers run here (changefeed[spark,postgres]); their executors the nodes' Python
    env = {**process_env(), **credentials_env(), "PYSPARK_PYTHON": python,
           "PYSPARK_DRIVER_PYTHON": sys.executable}  # fmt: skip
    out = shell(on_server(documented["object_store"], server), env, work)
    warehouse = f"s3a://{server.bucket}/warehouse"
    assert f"tables in {warehouse})" in out, out
    directory = work / ".changefeed" / "catalog"
    env["SPARK_CONF_DIR"] = str(directory / "conf")
    settings = catalog.load(directory).user_conf()
    assert settings["spark.hadoop.fs.s3a.endpoint"] == server.endpoint
    shell("changefeed catalog init", env, work)  # again: the page's settings are kept
    assert catalog.load(directory).user_conf() == settings
    try:
        landed = f"{CLUSTER_SCHEMA}.landed"
        # the landing, by spark-submit on the cluster's master, as the page runs it
        apps = len(cluster.state()["completedapps"])
        submit = documented["spark_submit"].replace(DOC_MASTER, cluster.url)
        submit = submit.replace("shop.orders", feed).replace("landing.shop_orders", landed)
        options = shlex.join(conf_args(EXECUTOR_CONF))
        submit = submit.replace("spark-submit ", f"spark-submit {options} ")
        out = shell(submit, {**env, "CHANGEFEED_CONNECTION": pg_uri}, work)
        assert f"{landed}: batch 1," in out, out
        assert len(cluster.state()["completedapps"]) == apps + 1, "not run on the cluster"

        project = package_project(work / "project", "cf_cluster", CLUSTER_MODELS)
        (profile,) = yaml.safe_load(documented["profile"]).values()
        outputs = profile["outputs"]
        session = outputs["session"]
        assert session["server_side_parameters"]["spark.master"] == DOC_MASTER
        session["server_side_parameters"] = {"spark.master": cluster.url, **EXECUTOR_CONF}
        env["CHANGEFEED_DBT_PACKAGES_DIR"] = str(dbt.packages_dir)

        def dbt_run(target: str, port: int | None = None, *select: str) -> None:
            if port is not None:
                assert str(outputs["thrift"]["port"]) == DOC_PORT
                outputs["thrift"]["port"] = port
            for output in outputs.values():
                output["schema"] = CLUSTER_SCHEMA
            (work / "profiles.yml").write_text(
                yaml.safe_dump({PROFILE: {"target": target, "outputs": outputs}})
            )
            command = [str(Path(sys.executable).parent / "dbt"), "run", "--project-dir",
                       str(project), "--profiles-dir", str(work), "--target", target,
                       "--target-path", str(work / f"target-{target}"), "--log-path",
                       str(work / "logs"), "--no-version-check", "--select", *select]  # fmt: skip
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                  timeout=600)  # fmt: skip
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

        dbt_run("session", None, "orders_current_delta")
        with thrift_server(documented["server"], cluster.url, env, work) as port:
            dbt_run("thrift", port, "orders_consumer", "orders_current")
            from pyhive import hive

            with contextlib.closing(hive.connect(host="127.0.0.1", port=port)) as connection:
                cursor = connection.cursor()

                def query(sql: str) -> list[tuple[Any, ...]]:
                    cursor.execute(sql)
                    return sorted(tuple(row) for row in cursor.fetchall())

                events = sorted((shard, ulid.hex().upper(), key)
                                for shard, ulid, key in kit.feed_rows(pg_uri, feed))  # fmt: skip
                assert query(f"select shard_id, hex(ulid), id from {landed}") == events
                consumer = f"{CLUSTER_SCHEMA}.orders_consumer"
                assert query(f"select shard_id, hex(ulid), id from {consumer}") == events
                source = sorted((key, row["v"]) for key, row in _source(pg_uri, feed).items())
                for model in ("orders_current", "orders_current_delta"):
                    state = query(f"select id, payload.v from {CLUSTER_SCHEMA}.{model}")
                    assert state == source, model
            # the server's executors ran on both workers
            workers = cluster.state()["workers"]
            assert sorted(w["coresused"] for w in workers) == [1, 1], workers
        _all_in_the_bucket(server, work, ["landed", "orders_consumer", "orders_current",
                                          "orders_current_delta"])  # fmt: skip
        # `changefeed status --consumer` reads only local files without Spark: it leaves these
        # to a Spark of its own
        with pytest.raises(NeedsSpark, match=f"{CLUSTER_SCHEMA}.landed lives on s3a://"):
            feed_heads(catalog.load(directory), landed, [0])
    finally:
        catalog.stop(catalog.load(directory))  # its server, started by init


def _all_in_the_bucket(server: Any, work: Path, tables: list[str]) -> None:
    """Each table's files are in the bucket (Delta's log too), and no table file is on the
    local disk of the project."""
    stored = server.keys("warehouse/")
    for table in tables:
        files = [k for k in stored if k.startswith(f"warehouse/{CLUSTER_SCHEMA}.db/{table}/")]
        assert any(k.endswith(".parquet") for k in files), (table, stored)
        if table.endswith("_delta"):
            assert any("/_delta_log/" in k for k in files), (table, files)
    table_dirs = ("_delta_log", f"{CLUSTER_SCHEMA}.db", "spark-warehouse", "metastore_db")
    local = [p for p in work.rglob("*") if p.suffix == ".parquet" or p.name in table_dirs]
    assert local == [], local


def _service_and_retention(spark: Any, options: dict[str, str], pg_uri: str,
                           feed: str) -> None:  # fmt: skip
    """On Connect: a landing service with two targets lands the feed into both once; then
    retention removes what its policy lets go from a parquet and a Delta table, and keeps
    every batch above the horizon it reports, whole."""
    from changefeed.spark.feedtable import retain
    from changefeed.spark.landing import FeedTarget, LandingService

    targets = [FeedTarget(options, "connect_tests.s_parquet", "parquet"),
               FeedTarget(options, "connect_tests.s_delta", "delta")]  # fmt: skip
    service = LandingService(spark, targets)
    try:
        states = service.run_once()
    finally:
        service.close()
    assert [s.state for s in states] == ["ok", "ok"], states
    for target in targets:
        rows = spark.table(target.table).collect()
        assert sorted((r.shard_id, bytes(r.ulid), r.id) for r in rows) == kit.feed_rows(
            pg_uri, feed
        ), target.table
    for fmt in ("parquet", "delta"):
        table = TABLES[fmt]
        before = spark.table(table).collect()
        result = retain(spark, table, consumers=[], keep_last=1)
        assert result.removed_batches > 0, (fmt, result)
        kept = sorted(tuple(r) for r in before if r.changefeed_batch > result.horizon)
        assert sorted(tuple(r) for r in spark.table(table).collect()) == kept, fmt
        assert result.oldest_batch == result.horizon + 1, (fmt, result)


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
