"""A shared catalog whose warehouse is on an S3-compatible object store (docs/deploying.md,
"Object stores"): moto's S3 server on 127.0.0.1, reached by Spark through Hadoop's S3A
connector. The page's commands set the catalog up (``changefeed catalog init --warehouse
s3a://...`` and the store's settings in the section of spark-defaults.conf that ``init``
keeps); a continuous ``changefeed land`` lands one feed into a Delta table and another
into a parquet table while a dbt process builds a Delta current-state model on the first,
twice, with updates and a delete between; then the model equals the source table, the
parquet table holds every event, and every file of the three tables is in the bucket and
none on the local disk. (What needs no server, the conf file's rewrite and the refusals,
is in tests/test_catalog_config.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.dbt_harness import package_project
from tests.support.doc_blocks import sample
from tests.support.real_parts import unavailable
from tests.support.s3_server import credentials_env, s3_server
from tests.support.shared_catalog import (
    CLI,
    DBT_PROCESS_HEAD,
    landed_source,
    log_text,
    process_env,
    wait_for,
    write_profile,
)

#: slow: two Spark processes (the landing and dbt) and the catalog's, 1.5 to 3 minutes.
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

SCHEMA = "cf_s3"
BUCKET = "changefeed-test"
WAREHOUSE = f"s3a://{BUCKET}/warehouse"
#: What the page's block names, replaced with this test's.
PAGE_BUCKET, PAGE_ENDPOINT = "my-bucket", "http://127.0.0.1:9000"
TABLES = ("landed_orders", "landed_items", "orders_state")

MODELS = {
    "sources.yml": landed_source(SCHEMA),
    "orders_state.sql": """{{ config(materialized='changefeed_current_state', unique_key='id',
    file_format='delta') }}
select e.shard_id, e.ulid, e.id, e.payload, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('landed', 'landed_orders'), this) }} as e
""",
}

#: The dbt process: deps; a run once the test writes ``landed-1``, another once it writes
#: ``landed-2``; then the model's rows, the parquet table's ids and the three tables'
#: locations, as JSON in ``result.json``.
DBT_PROCESS = DBT_PROCESS_HEAD + """
for n in (1, 2):
    while not (work / f"landed-{n}").exists():
        time.sleep(0.2)
    dbt("run")
    (work / f"run-{n}").touch()
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def location(table):
    rows = spark.sql(f"describe table extended {schema}.{table}").collect()
    return [r[1] for r in rows if r[0] == "Location"][0]
(work / "result.json").write_text(json.dumps({
    "state": [[r[0], r[1], r[2]] for r in spark.sql(
        "select id, payload.v, changefeed_deleted from {schema}.orders_state").collect()],
    "items": [r[0] for r in spark.sql("select id from {schema}.landed_items").collect()],
    "locations": {t: location(t) for t in {tables}},
}))
"""


def _page_block(block: str, endpoint: str) -> str:
    """The page's ``block``, on this test's bucket and server."""
    assert PAGE_BUCKET in block and PAGE_ENDPOINT in block, block
    return block.replace(f"s3a://{PAGE_BUCKET}/", f"s3a://{BUCKET}/").replace(
        PAGE_ENDPOINT, endpoint
    )


def _shell(text: str, env: dict[str, str], cwd: Path) -> str:
    """``text`` in bash, ``changefeed`` being this checkout's."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", text], cwd=cwd,
                          env={**env, "PATH": path}, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, f"{text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.timeout(1200)
def test_a_state_model_on_an_s3a_warehouse_equals_the_source(
    pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    from changefeed import _jars, catalog
    from changefeed.catalog_tables import NeedsSpark, feed_heads

    try:
        _jars.s3a_connector()
    except _jars.LakehouseJarsMissing as exc:
        unavailable("Hadoop's S3A connector", str(exc))
    started = time.monotonic()
    timings: dict[str, float] = {}
    env = {**process_env(), **credentials_env()}
    env["CHANGEFEED_DBT_PACKAGES_DIR"] = str(tmp_path / "dbt_packages")
    orders = kit.create_feed(dbt, pg_uri, "outbox", "id bigint primary key, v text",
                             capture="trigger", schema="cf_s3_src")  # fmt: skip
    items = kit.create_feed(dbt, pg_uri, "outbox", "id bigint primary key, v text",
                            capture="trigger", schema="cf_s3_src")  # fmt: skip
    _sql(pg_uri, f"insert into {orders} select g, 'v' || g from generate_series(1, 40) g")
    _sql(pg_uri, f"insert into {items} select g, 'i' || g from generate_series(1, 30) g")
    (tmp_path / "feeds.yml").write_text(
        "defaults:\n  payload: true\nfeeds:\n"
        f"  - feed: {orders}\n    table: {SCHEMA}.landed_orders\n    table_format: delta\n"
        f"  - feed: {items}\n    table: {SCHEMA}.landed_items\n    table_format: parquet\n"
    )
    project = package_project(tmp_path / "project", "cf_object_store", MODELS)
    write_profile(sample("shared-catalog-profiles"), tmp_path, SCHEMA)

    with s3_server(tmp_path, BUCKET) as server:
        timings["server"] = time.monotonic() - started
        # The page's commands: init on the bucket, the store's settings below the line
        # init keeps; init again keeps them (tests/test_catalog_config.py has the rest).
        out = _shell(_page_block(sample("object-store-catalog"), server.endpoint), env, tmp_path)
        assert f"tables in {WAREHOUSE})" in out, out
        directory = tmp_path / ".changefeed" / "catalog"
        env["SPARK_CONF_DIR"] = str(directory / "conf")
        conf_file = directory / "conf" / catalog.CONF_FILE
        settings = catalog.load(directory).user_conf()
        assert settings["spark.hadoop.fs.s3a.endpoint"] == server.endpoint
        _shell("changefeed catalog init", env, tmp_path)
        assert catalog.load(directory).user_conf() == settings, conf_file.read_text()
        assert catalog.load(directory).warehouse == WAREHOUSE
        timings["init"] = time.monotonic() - started

        land_log, dbt_log = tmp_path / "land.log", tmp_path / "dbt.log"
        procs: list[subprocess.Popen[str]] = []
        try:
            with land_log.open("w") as out_file:
                procs.append(subprocess.Popen(
                    [*CLI, "land", "--connection", pg_uri, "--feeds-file", "feeds.yml",
                     "--continuous", "--interval", "1", "--poll", "0.5", "--verbose"],
                    env=env, stdout=out_file, stderr=subprocess.STDOUT, text=True,
                    cwd=tmp_path, start_new_session=True,
                ))  # fmt: skip
            script = DBT_PROCESS.replace("{schema}", SCHEMA).replace("{tables}", repr(TABLES))
            with dbt_log.open("w") as out_file:
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", script, str(tmp_path), str(project)],
                    env=env, stdout=out_file, stderr=subprocess.STDOUT, text=True,
                    cwd=tmp_path, start_new_session=True,
                ))  # fmt: skip
            landing, dbt_proc = procs

            def landed(table: str, batch: int) -> bool:
                return f"{SCHEMA}.{table}: batch {batch}," in log_text(land_log)

            wait_for(lambda: landed("landed_orders", 1) and landed("landed_items", 1),
                     "first batches", 300, procs)  # fmt: skip
            timings["landed 1"] = time.monotonic() - started
            (tmp_path / "landed-1").touch()
            wait_for(lambda: (tmp_path / "run-1").exists(), "first dbt run", 300, procs)
            timings["run 1"] = time.monotonic() - started

            # One transaction a feed: each lands as one batch.
            _sql(pg_uri, f"update {orders} set v = 'new' || id where id % 4 = 0",
                 f"delete from {orders} where id in (3, 7)",
                 f"insert into {orders} values (41, 'v41')")  # fmt: skip
            _sql(pg_uri, f"insert into {items} values (31, 'i31')")
            wait_for(lambda: landed("landed_orders", 2) and landed("landed_items", 2),
                     "second batches", 120, procs)  # fmt: skip
            (tmp_path / "landed-2").touch()
            assert dbt_proc.wait(600) == 0, log_text(dbt_log)[-5000:]
            timings["run 2"] = time.monotonic() - started
            landing.send_signal(signal.SIGINT)
            assert landing.wait(120) == 0, log_text(land_log)[-3000:]
            # `changefeed status --consumer` reads only local files without Spark: these
            # it leaves to a Spark of its own.
            for table in ("landed_orders", "landed_items"):
                with pytest.raises(NeedsSpark, match=f"{table} lives on s3a://, not on a local"):
                    feed_heads(catalog.load(directory), f"{SCHEMA}.{table}", [0])
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            subprocess.run([*CLI, "catalog", "stop"], env=env, cwd=tmp_path,
                           capture_output=True, timeout=60)  # fmt: skip
        stored = server.keys("warehouse/")

    result = json.loads((tmp_path / "result.json").read_text())
    with psycopg.connect(pg_uri) as conn:
        source = conn.execute(f"select id, v from {orders}").fetchall()
        source_items = conn.execute(f"select id from {items}").fetchall()
    live = sorted((i, v) for i, v, deleted in result["state"] if not deleted)
    assert live == sorted(source) and len(live) == 39
    assert sorted(i for i, _, deleted in result["state"] if deleted) == [3, 7]
    assert sorted(result["items"]) == sorted(i for (i,) in source_items)

    # Every table's files are in the bucket, under the warehouse; none on the local disk.
    for table in TABLES:
        location = f"{WAREHOUSE}/{SCHEMA}.db/{table}"
        assert result["locations"][table] == location
        files = [k for k in stored if k.startswith(f"warehouse/{SCHEMA}.db/{table}/")]
        assert any(k.endswith(".parquet") for k in files), (table, stored)
        if table != "landed_items":
            assert any("/_delta_log/" in k for k in files), (table, files)
    table_dirs = ("_delta_log", f"{SCHEMA}.db", "spark-warehouse", "metastore_db")
    local = [p for p in tmp_path.rglob("*") if p.suffix == ".parquet" or p.name in table_dirs]
    assert local == [], local
    print({k: round(v, 1) for k, v in timings.items()}, f"{len(stored)} objects")


def _sql(uri: str, *statements: str) -> None:
    """The statements in one transaction."""
    with psycopg.connect(uri) as conn:
        for statement in statements:
            conn.execute(statement)
