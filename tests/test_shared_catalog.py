"""The shared catalog (changefeed catalog init): a landing loop, ``dbt run`` (dbt-spark
``method: session``) and ``changefeed status --consumer`` run at the same time, each in
a process of its own, on one catalog named by SPARK_CONF_DIR, and the consumer sees
every event of the source exactly once.

One scenario, processes as a project runs them: ``changefeed catalog init``; ``changefeed
land --continuous`` while a writer keeps committing; a dbt process whose two runs of a
consumer model overlap the landing; ``changefeed status --consumer`` meanwhile; then the
writer and the landing stop, and the dbt process runs the consumer a last time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import spark_source as kit
from tests.support.cli import WITHOUT_PYSPARK
from tests.support.dbt_harness import package_project, postgres_output
from tests.support.doc_blocks import sample
from tests.support.shared_catalog import (
    CLI,
    DBT_PROCESS_HEAD,
    init_catalog,
    landed_source,
    log_text,
    process_env,
    wait_for,
    write_profile,
)
from tests.support.spark_cluster import listening

#: slow: four JVMs (init, landing, dbt, status) at once take 1.5 to 6 minutes on 2 cores.
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

SCHEMA = "cf_shared"
LANDED = f"{SCHEMA}.landed_orders"
SHARDS = (0, 1)

MODELS = {
    "sources.yml": landed_source(SCHEMA),
    "orders_consumer.sql": """{{ config(materialized='incremental',
    incremental_strategy='insert_overwrite', partition_by=['changefeed_batch'],
    file_format='parquet') }}
select e.shard_id, e.ulid, e.payload.id as id,
    e.changefeed_batch as changefeed_feed_batch, {{ changefeed.feed_batch() }} as changefeed_batch
from {{ source('landed', 'landed_orders') }} as e
where {{ changefeed.feed_safe_point(source('landed', 'landed_orders'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
""",
}

#: The dbt process: deps; two runs while the landing runs (from when the test writes
#: ``landed``); once the test writes ``landing-stopped``, a last run, and the consumer's
#: rows dumped to ``consumer.json``.
DBT_PROCESS = DBT_PROCESS_HEAD + """
while not (work / "landed").exists():  # the test's go: the landed table exists
    time.sleep(0.2)
for n in (1, 2):
    dbt("run")
    (work / f"run-{n}").touch()
while not (work / "landing-stopped").exists():
    time.sleep(0.2)
dbt("run")
from pyspark.sql import SparkSession
rows = SparkSession.builder.getOrCreate().sql(
    "select shard_id, hex(ulid) from {schema}.orders_consumer").collect()
(work / "consumer.json").write_text(json.dumps([[r[0], r[1]] for r in rows]))
"""


def _writer(uri: str, feed: str, stop: threading.Event) -> None:
    """Transactions of 1 to 3 events, alternating shards, ~20 a second, until ``stop``."""
    key, i = 1, 0
    while not stop.is_set():
        size = 1 + i % 3
        kit.write_many_blocking(uri, feed, SHARDS[i % len(SHARDS)], key, size, size)
        key, i = key + size, i + 1
        time.sleep(0.05)


@pytest.mark.timeout(1800)  # four Spark processes at once: 3-7 min on a loaded 2-core machine
def test_landing_dbt_and_status_share_one_catalog(pg_uri: str, dbt: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    cli = list(CLI)
    env = process_env()
    # The documented commands (docs/spark-source.md), in a fresh project directory.
    conf_dir = init_catalog(sample("shared-catalog-init"), env, tmp_path)
    timings = {"init": time.monotonic() - started}

    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    stop_writing = threading.Event()
    writer = threading.Thread(target=_writer, args=(pg_uri, feed, stop_writing), daemon=True)
    writer.start()

    project = package_project(tmp_path / "project", "cf_shared_catalog", MODELS)
    write_profile(sample("shared-catalog-profiles"), tmp_path, SCHEMA)
    env["CHANGEFEED_DBT_PACKAGES_DIR"] = str(tmp_path / "dbt_packages")
    land_log, dbt_log = tmp_path / "land.log", tmp_path / "dbt.log"
    procs: list[subprocess.Popen[str]] = []
    try:
        with land_log.open("w") as out:
            landing = subprocess.Popen(
                [*cli, "land", "--connection", pg_uri, "--feed", feed, "--table", LANDED,
                 "--payload", "--continuous", "--interval", "2", "--poll", "0.5", "--verbose"],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                start_new_session=True,
            )  # fmt: skip
        procs.append(landing)
        with dbt_log.open("w") as out:
            dbt_proc = subprocess.Popen(
                [sys.executable, "-c", DBT_PROCESS.replace("{schema}", SCHEMA),
                 str(tmp_path), str(project)],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                start_new_session=True,
            )  # fmt: skip
        procs.append(dbt_proc)
        wait_for(lambda: ": batch 1," in log_text(land_log), "first landed batch", 300, procs)
        timings["first batch"] = time.monotonic() - started

        (tmp_path / "landed").touch()
        # Meanwhile a third process reads the landed table through the same catalog,
        # without Spark: PySpark cannot even be imported in it.
        status = subprocess.run(
            [sys.executable, "-c", WITHOUT_PYSPARK, "status", "--connection", pg_uri,
             "--feed", feed, "--consumer", f"{feed}={LANDED}", "--format", "json"],
            env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr[-3000:]
        assert status.stderr == "", status.stderr
        rows = [c for c in json.loads(status.stdout)["consumers"] if c["consumer"] == LANDED]
        assert sorted(c["shard"] for c in rows) == list(SHARDS), status.stdout
        assert any(c["cursor"] is not None for c in rows), status.stdout
        timings["status"] = time.monotonic() - started
        assert landing.poll() is None and dbt_proc.poll() is None, "both still running"

        wait_for(lambda: (tmp_path / "run-2").exists(), "second dbt run", 300, procs)
        timings["dbt runs"] = time.monotonic() - started
        stop_writing.set()
        writer.join()
        events = kit.feed_rows(pg_uri, feed)
        landed_all = f"{len(events)} events"
        # Caught up: a run that ended well after the last commit found nothing new (with
        # --verbose the landing prints every run, each 0.5 s).
        time.sleep(2.5)
        mark = len(log_text(land_log))
        wait_for(lambda: _caught_up(log_text(land_log)[mark:]), "caught-up landing", 120, [landing])
        landing.send_signal(signal.SIGINT)
        assert landing.wait(60) == 0, log_text(land_log)[-3000:]
        (tmp_path / "landing-stopped").touch()
        assert dbt_proc.wait(240) == 0, log_text(dbt_log)[-5000:]
        timings["total"] = time.monotonic() - started
    finally:
        stop_writing.set()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        subprocess.run([*cli, "catalog", "stop"], env=env, cwd=tmp_path, capture_output=True,
                       timeout=60)  # fmt: skip

    dumped = json.loads((tmp_path / "consumer.json").read_text())
    consumed = Counter((int(shard), ulid.lower()) for shard, ulid in dumped)
    source = Counter((shard, ulid.hex()) for shard, ulid, *_ in events)
    assert max(consumed.values()) == 1, "an event consumed twice"
    assert consumed == source, f"consumer != source ({landed_all})"
    print({k: round(v, 1) for k, v in timings.items()}, landed_all)
    _a_stopped_catalog_stays_stopped(project, conf_dir, env, tmp_path, pg_uri)
    _a_rebooted_catalog_is_started_by_the_spark_launcher(project, conf_dir, env, cli, tmp_path)


def _a_stopped_catalog_stays_stopped(
    project: Path, conf_dir: Path, env: dict[str, str], cwd: Path, pg_uri: str
) -> None:
    """`changefeed catalog stop` keeps the catalog stopped: `dbt run` (dbt-spark's session)
    fails within seconds and before Spark starts, in dbt's four lines, the last naming
    `changefeed catalog init` (the dbt_changefeed plugin); commands that start no Spark
    session (`dbt parse`, a PostgreSQL target) are not stopped by it; the commands
    refuse alike."""
    from changefeed.local import catalog

    directory = Path(conf_dir).parent
    shared = catalog.load(directory)
    assert not listening(shared.port), "the scenario ends with `changefeed catalog stop`"
    started = time.monotonic()
    run = _dbt(["run", "--project-dir", str(project)], env, cwd)
    seconds = time.monotonic() - started
    lines = (run.stdout + run.stderr).splitlines()
    assert run.returncode == 2, run.stdout
    assert run.stdout.splitlines()[-1].strip() == f"changefeed: {catalog.stopped_message(shared)}"
    # Running with dbt=, Encountered an error:, Runtime Error, the line above
    assert len(lines) <= 5, lines
    assert not [line for line in lines if line.startswith(("\tat ", "Traceback", "WARNING"))]
    assert not (cwd / "metastore_db").exists()
    print(f"dbt run on a stopped catalog: {len(lines)} lines in {seconds:.1f} s")
    assert seconds < 15, seconds  # about 2 s alone: no Spark starts

    parse = _dbt(["parse", "--project-dir", str(project)], env, cwd)
    assert parse.returncode == 0, parse.stdout[-3000:]
    # The same project on a PostgreSQL target: no Spark session, so no catalog to check.
    profiles = yaml.safe_load((cwd / "profiles.yml").read_text())
    (profile,) = profiles.values()
    profile["outputs"]["pg"] = {**postgres_output(pg_uri), "schema": SCHEMA}
    (cwd / "profiles.yml").write_text(yaml.safe_dump(profiles))
    show = _dbt(["show", "--project-dir", str(project), "--target", "pg", "--inline",
                 "select 41 + 1 as answer"], env, cwd)  # fmt: skip
    assert show.returncode == 0 and "42" in show.stdout, show.stdout[-3000:]
    with pytest.raises(catalog.CatalogError, match="changefeed catalog init --dir"):
        catalog.ensure_running(shared)
    assert not listening(shared.port)


def _dbt(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    dbt = str(Path(sys.executable).parent / "dbt")
    options = ["--profiles-dir", str(cwd), "--log-path", str(cwd / "logs"), "--no-version-check"]
    return subprocess.run([dbt, *args, *options], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def _a_rebooted_catalog_is_started_by_the_spark_launcher(
    project: Path, conf_dir: Path, env: dict[str, str], cli: list[str], cwd: Path
) -> None:
    """After a reboot (the server down, not by `changefeed catalog stop`), any Spark launch
    on SPARK_CONF_DIR starts its server, saying so in one line, and so does dbt's plugin
    before dbt starts Spark; a server that cannot start stops the launch, and `dbt run`
    before Spark, with one line naming the command that shows why."""
    import pyspark

    from changefeed.local import catalog

    directory = Path(conf_dir).parent
    shared = catalog.load(directory)
    (directory / catalog.STOPPED_FILE).unlink()  # what a reboot leaves: a server not running
    assert not listening(shared.port)
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    launch = subprocess.run([str(spark_submit), "--version"], env=env, cwd=cwd,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert launch.returncode == 0, launch.stderr[-2000:]
    started = [line for line in launch.stderr.splitlines() if line.startswith("changefeed:")]
    assert started == [
        f"changefeed: starting the server of the shared catalog (127.0.0.1:{shared.port}), "
        f"which was stopped: changefeed catalog init --dir {directory}"
    ], launch.stderr[-2000:]
    assert listening(shared.port)
    subprocess.run([*cli, "catalog", "stop", "--dir", str(directory)], env=env, cwd=cwd,
                   capture_output=True, timeout=60, check=True)  # fmt: skip
    (directory / catalog.STOPPED_FILE).unlink()  # again as after a reboot

    broken = cwd / "broken-conf"
    broken.mkdir()
    (broken / catalog.ENV_FILE).write_text(
        catalog.launcher_script(shared, python="/nowhere/python")
    )
    launch = subprocess.run([str(spark_submit), "--version"], cwd=cwd,
                            env={**env, "SPARK_CONF_DIR": str(broken)},
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert launch.returncode == 1, launch.stderr[-2000:]
    assert launch.stderr.strip().splitlines()[-1] == (
        f"changefeed: the server of the shared catalog (127.0.0.1:{shared.port}) is stopped "
        f"and did not start; run changefeed catalog init --dir {directory} to see why"
    ), launch.stderr
    assert "Spark" not in launch.stderr and not listening(shared.port)

    # dbt's plugin, before Spark: the same start, in dbt's process.
    said: list[str] = []
    catalog.before_spark(shared, announce=said.append)
    assert said == [catalog.starting_message(shared)] and listening(shared.port)
    catalog.before_spark(shared, announce=said.append)  # running: one connect, no word
    assert len(said) == 1
    subprocess.run([*cli, "catalog", "stop", "--dir", str(directory)], env=env, cwd=cwd,
                   capture_output=True, timeout=60, check=True)  # fmt: skip
    (directory / catalog.STOPPED_FILE).unlink()
    settings = shared.pgdata / "postgresql.conf"
    kept = settings.read_text()
    settings.write_text(kept + "shared_buffers = 'none'\n")  # the server cannot start
    try:
        run = _dbt(["run", "--project-dir", str(project)], env, cwd)
    finally:
        settings.write_text(kept)
    lines = (run.stdout + run.stderr).splitlines()
    assert run.returncode == 2, run.stdout
    assert run.stderr.splitlines() == [f"changefeed: {catalog.starting_message(shared)}"]
    failed = run.stdout.splitlines()[-1].strip()
    assert failed == f"changefeed: {catalog.start_failed_message(shared)}", lines
    assert len(lines) <= 5 and not listening(shared.port), lines


def _caught_up(log: str) -> bool:
    """The landing's last line in ``log`` says it found nothing new."""
    lines = [line for line in log.splitlines() if f"{LANDED}:" in line]
    return bool(lines) and "nothing new" in lines[-1]
