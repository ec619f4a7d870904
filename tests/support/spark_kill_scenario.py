"""Run dbt-spark (session method) in a process of its own, for the Spark kill tests.

``python tests/support/spark_kill_scenario.py PLAN.json`` starts a local Spark with a Derby Hive
metastore in ``plan["workdir"]/warehouse`` (so that a later process sees what an
earlier, killed one committed), then runs the plan's steps in order and appends one JSON
line per finished step to ``plan["workdir"]/steps.jsonl``:

* ``{"sql": "..."}`` runs a statement.
* ``{"land": {"table": "s.t", "rows": [[shard, "ULID hex", order_id, "status"], ...]}}``
  writes one batch of a landed feed with :func:`changefeed.spark.feedtable.write_batch`.
* ``{"landing": {"table": "s.t", "format": "delta", "options": {...}}}`` lands a
  changefeed source (``changefeed.spark.landing.land``) into a table.
* ``{"events": {"uri": ..., "feed": ..., "shard": 0, "start": 1, "count": 10}}`` writes
  events ``id = start ..`` into a PostgreSQL feed (``tests.support.spark_source``).
* ``{"dbt": [args...], "env": {...}, "expect_error": "text"}`` runs dbt in-process
  against the step's or the plan's ``project_dir`` (default ``integration_tests/``; its
  failure fails the plan unless expected).
* ``{"dump": {"out": "name.json", "tables": ["s.t", ...]}}`` writes each table's rows
  (binary as hex; missing tables as null) to ``workdir/name.json``.
* ``{"pause_before": "regex"}`` / ``{"pause_after": "regex"}``: from now on, the first
  Spark statement matching the regex writes ``workdir/paused`` (its text) before /
  after it runs, and then the process sleeps until the test kills it.

``plan["lakehouse"]`` starts Spark with Delta Lake and Iceberg, and ``plan["default_catalog"]``
makes a catalog the session's current one (Iceberg's, for dbt-spark's iceberg models).
``plan["sleep_udf"]`` registers ``cf_test_sleep(ms, value)``, true after sleeping ``ms``: a
row slow-down that Spark deems deterministic, which a Delta or Iceberg MERGE requires of
its source (``reflect('java.lang.Thread', 'sleep', ...)`` is not).

The test kills the whole process group (this Python process and its Spark JVM) with
SIGKILL, which is what a lost node or an OOM kill does.

``python tests/support/spark_kill_scenario.py --resident PLAN.json`` is the **resident
driver** (:class:`Resident`): one process that runs a scenario's uninterrupted steps, plan
after plan, so that they share one warm JVM and one dbt parse, while only a step that is
killed gets a fresh process of its own (:func:`run_plan`). The two never run at once, and
an embedded Derby metastore admits one JVM: after each plan the resident shuts its Derby
database down (which releases the database's lock; the metastore's connection pool opens
it again on its next use), and before each plan it forgets every table it had cached,
since a killed process may have changed the files underneath.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(1, str(REPO))  # tests.support.dbt_harness

PROFILE = "changefeed_integration_tests"


def _profiles(workdir: Path, schema: str) -> Path:
    import yaml

    directory = workdir / f"profiles-{schema}"
    directory.mkdir(exist_ok=True)
    output = {
        "type": "spark",
        "method": "session",
        "host": "localhost",
        "schema": schema,
        "threads": 1,
    }
    profile = {PROFILE: {"target": "spark", "outputs": {"spark": output}}}
    (directory / "profiles.yml").write_text(yaml.safe_dump(profile))
    return directory


def _pause_hook(pattern: str, after: bool, marker: Path) -> None:
    from pyspark.sql import SparkSession

    original = SparkSession.sql
    regex = re.compile(pattern, re.IGNORECASE | re.DOTALL)

    def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if not regex.search(query):
            return original(self, query, *args, **kwargs)
        if not after:
            marker.write_text(query)
            time.sleep(3600)
        result = original(self, query, *args, **kwargs)
        marker.write_text(query)
        time.sleep(3600)
        return result

    SparkSession.sql = sql  # type: ignore[method-assign]


def _plain(value: Any) -> Any:
    """A JSON-able, exactly comparable form of one cell."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex().upper()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _dump(spark: Any, tables: list[str]) -> dict[str, Any]:
    # changefeed's check: a metastore that fails to answer is an error, not a missing table
    from changefeed.spark.feedtable import table_exists

    out: dict[str, Any] = {}
    for table in tables:
        if not table_exists(spark, table):
            out[table] = None
            continue
        spark.sql(f"refresh table {table}")
        frame = spark.table(table)
        rows = []
        for row in frame.collect():
            rows.append([_plain(v) for v in row])
        out[table] = {"columns": frame.columns, "rows": rows}
    return out


def _land(spark: Any, spec: dict[str, Any]) -> int:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from changefeed.spark.feedtable import write_batch

    schema = StructType(
        [
            StructField("shard_id", IntegerType(), False),
            StructField("ulid", BinaryType(), False),
            StructField("order_id", LongType(), False),
            # As `changefeed land --payload` lands it: the source row is a struct.
            StructField(
                "payload",
                StructType(
                    [
                        StructField("order_id", LongType(), True),
                        StructField("status", StringType(), True),
                    ]
                ),
                True,
            ),
        ]
    )
    rows = [(int(s), bytes.fromhex(u), int(o), (int(o), st)) for s, u, o, st in spec["rows"]]
    return write_batch(spark, spec["table"], spark.createDataFrame(rows, schema))


def _landing(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from changefeed.spark.landing import land

    result = land(spark, spec["options"], spec["table"], table_format=spec.get("format"))
    return {"batch": result.batch, "events": result.events}


def _events(spec: dict[str, Any]) -> None:
    from tests.support.spark_source import write_many_blocking

    write_many_blocking(spec["uri"], spec["feed"], spec["shard"], spec["start"], spec["count"],
                        spec.get("per_tx", 10))  # fmt: skip


def _register_sleep(spark: Any) -> None:
    def sleep(ms: int, value: Any) -> bool:
        time.sleep(ms / 1000)
        return True

    spark.udf.register("cf_test_sleep", sleep, "boolean")


def _project_dir(plan: dict[str, Any], step: dict[str, Any] | None = None) -> str:
    """The step's dbt project (``project_dir`` of the step, else of the plan), by default
    integration_tests/."""
    chosen = (step or {}).get("project_dir") or plan.get("project_dir")
    return str(chosen or REPO / "integration_tests")


#: The resident driver's parsed manifests, by :func:`_manifest_key`: a dbt invocation given
#: one skips parsing (as in the tests' own harness). Its plans switch between projects and
#: schemas, and dbt's partial parsing re-read a whole project (about 4 s) at each switch.
_MANIFESTS: dict[tuple[Any, ...], Any] = {}


def _project_files(project_dir: str) -> tuple[tuple[str, int, int], ...]:
    """Each file of a project (path, size, modification time), without dbt's own output."""
    found = []
    for root, dirs, files in os.walk(project_dir):
        dirs[:] = [d for d in dirs if d not in ("target", "logs", "dbt_packages")]
        for name in files:
            stat = os.stat(os.path.join(root, name))
            found.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def _manifest_key(common: list[str], env: dict[str, str], project_dir: str) -> tuple[Any, ...]:
    """Everything a parse depends on: the arguments but the command, the environment the
    step sets, and the project's files (a test may rewrite a model between plans)."""
    return (tuple(common), tuple(sorted(env.items())), _project_files(project_dir))


def _dbt(
    workdir: Path, plan: dict[str, Any], step: dict[str, Any], *, reuse_parse: bool = False
) -> str | None:
    """Run the step's dbt command in-process; its error text, or None. ``reuse_parse`` (the
    resident driver) keeps each parsed manifest for the next invocation of the same
    project, profile, variables and files."""
    from dbt.cli.main import dbtRunner

    profiles = _profiles(workdir, step.get("schema", plan["schema"]))

    env = {
        "CHANGEFEED_DBT_PACKAGES_DIR": plan["packages_dir"],
        "DBT_TARGET_PATH": str(workdir / f"target-{step.get('schema', plan['schema'])}"),
        **step.get("env", {}),
    }
    os.environ.update(env)
    project_dir = _project_dir(plan, step)
    common = [
        "--project-dir",
        project_dir,
        "--profiles-dir",
        str(profiles),
        "--target",
        "spark",
        "--log-path",
        str(workdir / "logs"),
        "--no-version-check",
    ]
    command = step["dbt"]
    if command[0] not in ("deps", "clean"):
        common += ["--vars", json.dumps(plan.get("vars", {}))]
    manifest = None
    if reuse_parse and command[0] not in ("deps", "clean", "parse"):
        key = _manifest_key(common, env, project_dir)
        manifest = _MANIFESTS.get(key)
        if manifest is None:
            parsed = dbtRunner().invoke(["parse", *common])
            if parsed.success:
                manifest = _MANIFESTS[key] = parsed.result
    result = dbtRunner(manifest=manifest).invoke([*command, *common])
    if result.success:
        return None
    messages = [str(result.exception)] if result.exception else []
    for item in getattr(result.result, "results", None) or []:
        if getattr(item, "status", None) in ("error", "fail"):
            messages.append(str(getattr(item, "message", item)))
    return "\n".join(messages) or "dbt failed"


def _session(plan: dict[str, Any], workdir: Path) -> Any:
    """The driver's Spark session, and dbt made ready to run in this process."""
    os.chdir(workdir)  # derby.log and spark-warehouse debris stay in the workdir
    from changefeed.local.spark import local_spark_session

    # parquet unless the plan says "lakehouse": the scenario's four JVMs need no
    # Delta/Iceberg classes
    spark = local_spark_session(
        "changefeed-kill-test",
        warehouse_dir=workdir / "warehouse",
        hive=True,
        lakehouse=bool(plan.get("lakehouse")),
    )
    if plan.get("default_catalog"):
        spark.conf.set("spark.sql.defaultCatalog", plan["default_catalog"])
    if plan.get("sleep_udf"):
        _register_sleep(spark)
    from tests.support.dbt_harness import deps_lock, speed_up_in_process_dbt

    speed_up_in_process_dbt()  # as in the tests' own harness
    if not (Path(plan["packages_dir"]) / "changefeed").exists():
        with deps_lock(Path(_project_dir(plan))):
            _dbt(workdir, plan, {"dbt": ["deps"]})
    return spark


def _run_steps(
    spark: Any, workdir: Path, plan: dict[str, Any], log: Path, *, killable: bool = True
) -> bool:
    """Run ``plan["steps"]`` in order, one JSON line per finished step in ``log``; False
    after the first failed step (its traceback in its line). A ``killable`` driver (not
    the resident one) marks each step's start for the test's kill conditions
    (:func:`step_started`) and may pause until it is killed."""
    for index, step in enumerate(plan["steps"]):
        if killable:
            (workdir / "current_step").write_text(f"{index} {time.time()}")
        started = time.monotonic()
        record: dict[str, Any] = {"index": index, "step": next(iter(step))}
        if "name" in step:
            record["name"] = step["name"]
        try:
            if "sql" in step:
                spark.sql(step["sql"]).collect()
            elif "land" in step:
                record["batch"] = _land(spark, step["land"])
            elif "landing" in step:
                record.update(_landing(spark, step["landing"]))
            elif "events" in step:
                _events(step["events"])
            elif "dbt" in step:
                error = _dbt(workdir, plan, step, reuse_parse=not killable)
                expected = step.get("expect_error")
                if expected is None and error is not None:
                    raise RuntimeError(f"dbt {step['dbt']} failed: {error}")
                if expected is not None and (error is None or expected not in error):
                    raise RuntimeError(
                        f"dbt {step['dbt']}: expected an error with {expected!r}, got {error!r}"
                    )
                record["error"] = error
            elif "dump" in step:
                out = _dump(spark, step["dump"]["tables"])
                (workdir / step["dump"]["out"]).write_text(json.dumps(out))
            elif "pause_before" in step and killable:
                _pause_hook(step["pause_before"], False, workdir / "paused")
            elif "pause_after" in step and killable:
                _pause_hook(step["pause_after"], True, workdir / "paused")
            else:
                raise ValueError(f"unknown step {step}")
        except Exception:
            record["failed"] = traceback.format_exc()
            with log.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            return False
        record["seconds"] = round(time.monotonic() - started, 2)
        with log.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
    return True


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    workdir = Path(plan["workdir"])
    spark = _session(plan, workdir)
    if not _run_steps(spark, workdir, plan, workdir / "steps.jsonl"):
        sys.exit(1)
    spark.stop()


def _metastore_url(workdir: Path) -> str | None:
    """The JDBC URL of the driver's embedded Derby metastore; None before any statement
    has used the metastore (then nothing is booted or locked)."""
    database = workdir / "warehouse" / "metastore_db"
    return f"jdbc:derby:;databaseName={database}" if database.exists() else None


def _release_metastore(spark: Any, workdir: Path) -> None:
    """Shut the embedded Derby database of the metastore down: its lock goes, and a killed
    process can open it. (Derby reports a shutdown as an SQLException.)"""
    url = _metastore_url(workdir)
    if url is None:
        return
    try:
        spark.sparkContext._jvm.java.sql.DriverManager.getConnection(f"{url};shutdown=true")
    except Exception as exc:  # the expected way Derby says "shut down"
        if "08006" not in str(exc) and "shutdown" not in str(exc).lower():
            raise


def _boot_metastore(spark: Any, workdir: Path, timeout: float = 60.0) -> None:
    """Boot the Derby database of the metastore again in this process, before a plan's
    first statement. After another process has held it (a killed driver, here), the
    first boot in a process that had booted and shut it down before fails with XSDB6
    ("another instance may have booted it"), and the one after it succeeds: measured, at
    every kill. Left to Hive, that first failure happens inside its metastore call, and
    Hive reports a database it could not read as missing, so that
    ``spark.catalog.tableExists`` answers False for a table that exists."""
    url = _metastore_url(workdir)
    if url is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            spark.sparkContext._jvm.java.sql.DriverManager.getConnection(url).close()
            return
        except Exception as exc:
            if "XSDB6" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _forget_tables(spark: Any) -> None:
    """Drop every cached table and file listing: a killed process ran since the last plan."""
    spark.catalog.clearCache()
    spark._jsparkSession.sessionState().catalog().invalidateAllCachedTables()


def resident() -> None:
    """The resident driver: one plan per line of standard input (a plan file's path), each
    answered by one line in ``workdir/resident.jsonl`` once it has run."""
    plan = json.loads(Path(sys.argv[2]).read_text())
    workdir = Path(plan["workdir"])
    spark = _session(plan, workdir)
    answers = workdir / "resident.jsonl"
    _release_metastore(spark, workdir)
    with answers.open("a") as fh:
        fh.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(Path(line.strip()).read_text())
        _boot_metastore(spark, workdir)
        _forget_tables(spark)
        ok = _run_steps(spark, workdir, request, Path(request["log"]), killable=False)
        _release_metastore(spark, workdir)
        with answers.open("a") as fh:
            fh.write(json.dumps({"plan": request["number"], "ok": ok}) + "\n")
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] == "--resident":
        resident()
    else:
        main()


# -- test side: run a plan in a new process group, optionally kill it -------------------


class PlanResult:
    """What one driver process did: its exit code, finished steps, and how it ended."""

    def __init__(
        self,
        returncode: int,
        steps: list[dict[str, Any]],
        killed: str | None,
        seconds: float,
        output: str,
    ) -> None:
        self.returncode = returncode
        self.steps = steps
        self.killed = killed
        self.seconds = seconds
        self.output = output

    def failure(self) -> str | None:
        """The traceback of a failed step, if any."""
        for step in self.steps:
            if "failed" in step:
                return str(step["failed"])
        return None


def run_plan(
    workdir: Path,
    plan: dict[str, Any],
    *,
    kill_when: Any = None,
    timeout: float = 900.0,
) -> PlanResult:
    """Run ``plan`` in a fresh driver process; SIGKILL its process group once ``kill_when``
    (a callable returning a description or None, polled every 20 ms) fires."""
    import signal
    import subprocess

    workdir.mkdir(parents=True, exist_ok=True)
    # An earlier process's step marker would date this one's step (step_started)
    for debris in ("steps.jsonl", "paused", "current_step"):
        (workdir / debris).unlink(missing_ok=True)
    plan = {**plan, "workdir": str(workdir)}
    plan_file = workdir / "plan.json"
    plan_file.write_text(json.dumps(plan))
    log_file = workdir / "driver.log"
    started = time.monotonic()
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(plan_file)],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        killed: str | None = None
        try:
            while proc.poll() is None:
                if time.monotonic() - started > timeout:
                    killed = "timeout"
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                if kill_when is not None:
                    reason = kill_when()
                    if reason:
                        os.killpg(proc.pid, signal.SIGKILL)
                        killed = str(reason)
                        break
                time.sleep(0.02)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
    steps = (
        [json.loads(line) for line in (workdir / "steps.jsonl").read_text().splitlines()]
        if (workdir / "steps.jsonl").exists()
        else []
    )
    output = log_file.read_text(errors="replace")[-4000:]
    return PlanResult(proc.returncode, steps, killed, time.monotonic() - started, output)


class Resident:
    """The resident driver of one scenario (the module docstring): started with the
    scenario's plan settings, it runs plan after plan of uninterrupted steps in one
    process. Use it as a context manager; :meth:`run` returns what :func:`run_plan` does
    (``killed`` None, return code 0), and raises when a step fails."""

    def __init__(self, workdir: Path, plan: dict[str, Any], *, timeout: float = 900.0) -> None:
        import subprocess

        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir, self.plan, self.timeout = workdir, {**plan, "workdir": str(workdir)}, timeout
        self.answers = workdir / "resident.jsonl"
        self.answers.unlink(missing_ok=True)
        self.log_file = workdir / "resident.log"
        self.number = 0
        settings = workdir / "resident-plan.json"
        settings.write_text(json.dumps({**self.plan, "steps": []}))
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--resident", str(settings)],
                cwd=workdir, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, text=True,
            )  # fmt: skip
        self._wait(lambda answer: "ready" in answer, "start")

    def __enter__(self) -> Resident:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answers(self) -> list[dict[str, Any]]:
        if not self.answers.exists():
            return []
        return [json.loads(line) for line in self.answers.read_text().splitlines() if line]

    def _wait(self, done: Any, what: str) -> dict[str, Any]:
        started = time.monotonic()
        while True:
            for answer in self._answers():
                if done(answer):
                    return answer
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the resident driver exited ({self.proc.returncode}) during {what}:\n"
                    + self.log_file.read_text(errors="replace")[-4000:]
                )
            if time.monotonic() - started > self.timeout:
                self.close()
                raise RuntimeError(f"the resident driver took over {self.timeout} s for {what}")
            time.sleep(0.05)

    def run(self, steps: list[dict[str, Any]]) -> PlanResult:
        """Run ``steps`` in the resident process; their records as :class:`PlanResult`.
        Uninterrupted steps must succeed: a failed one raises, with its traceback."""
        self.number += 1
        number = self.number
        log = self.workdir / f"resident-steps-{number}.jsonl"
        log.unlink(missing_ok=True)
        request = self.workdir / f"resident-plan-{number}.json"
        request.write_text(json.dumps({**self.plan, "steps": steps, "number": number,
                                       "log": str(log)}))  # fmt: skip
        started = time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{request}\n")
        self.proc.stdin.flush()
        answer = self._wait(lambda a: a.get("plan") == number, f"plan {number}")
        lines = log.read_text().splitlines() if log.exists() else []
        result = PlanResult(0, [json.loads(line) for line in lines], None,
                            time.monotonic() - started,
                            self.log_file.read_text(errors="replace")[-4000:])  # fmt: skip
        if not answer["ok"]:
            raise RuntimeError(f"plan {number} of the resident driver failed: "
                               f"{result.failure() or result.output}")  # fmt: skip
        return result

    def close(self) -> None:
        """End the process: its standard input closes, it stops its session and exits."""
        import signal
        import subprocess

        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:  # a stuck JVM: end its whole group
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=60)


def read_dumps(workdir: Path) -> dict[str, Any]:
    """Every ``dump`` step's file in ``workdir``, by name (``out`` without ``.json``)."""
    return {
        path.stem: json.loads(path.read_text())
        for path in workdir.glob("*.json")
        if not path.stem.startswith(("plan", "resident"))  # the drivers' own files
    }


def table_dir(workdir: Path, schema: str, table: str) -> Path:
    """The managed location of ``schema.table`` in the driver's warehouse."""
    return workdir / "warehouse" / f"{schema}.db" / table


def step_started(workdir: Path, index: int) -> float | None:
    """When the driver started step ``index`` (epoch seconds), or None if it has not yet."""
    marker = workdir / "current_step"
    try:
        current, started = marker.read_text().split()
    except (OSError, ValueError):
        return None
    return float(started) if int(current) == index else None


def written_parts(workdir: Path, index: int, directory: Path) -> str | None:
    """A kill condition: during step ``index``, a task has written data into a job's
    uncommitted output under ``directory`` (``.spark-staging-*`` of an insert, or
    ``_temporary`` of a create-table-as-select)."""
    since = step_started(workdir, index)
    if since is None or not directory.exists():
        return None
    for pattern in (".spark-staging-*/**/part-*", "_temporary/**/part-*"):
        for path in directory.glob(pattern):
            if path.stat().st_mtime >= since - 1:
                return f"uncommitted output file {path.relative_to(directory)}"
    return None


def data_files_written(workdir: Path, index: int, directory: Path) -> str | None:
    """A kill condition for Delta and Iceberg, which write a job's data files where they
    stay and commit them afterwards (a new ``_delta_log`` entry, a new Iceberg metadata
    file): during step ``index``, a task has created a data file under ``directory``."""
    since = step_started(workdir, index)
    if since is None or not directory.exists():
        return None
    for path in directory.rglob("*.parquet"):
        if "_delta_log" in path.parts or "metadata" in path.parts:
            continue
        try:
            if path.stat().st_mtime >= since - 1:
                return f"uncommitted data file {path.relative_to(directory)}"
        except FileNotFoundError:  # a task's attempt file went away
            continue
    return None


def staging_started(workdir: Path, index: int, directory: Path) -> str | None:
    """A kill condition: during step ``index``, an insert's write job has started under
    ``directory`` (its ``.spark-staging-*`` directory exists)."""
    since = step_started(workdir, index)
    if since is None or not directory.exists():
        return None
    for path in directory.glob(".spark-staging-*"):
        if path.stat().st_mtime >= since - 1:
            return f"write job running ({path.name})"
    return None


# -- the kill scenario shared by test_spark_consumer/test_spark_publish/test_health_models --

BASE = "cf_base"  # the uninterrupted runs
KILL = "cf_kill"  # the same runs, killed at several points and re-run
CONSUMER = "cf_orders_consumer"  # consumes the landed feed (written out)
SHORT = "cf_orders_consumer_short"  # consumes it with feed_events(), filtering
PUBLISHED = "cf_orders_published"  # publishes shop_orders as a feed
PUB_CONSUMER = "cf_published_consumer"  # consumes the published feed
MODELS = (CONSUMER, SHORT, PUBLISHED, PUB_CONSUMER)
#: What the kill runs run (SHORT is the same machinery as CONSUMER; it runs in BASE only).
KILL_MODELS = (CONSUMER, PUBLISHED, PUB_CONSUMER)
LANDED = "landed_orders"
HEALTH = ("changefeed_feed_health", "changefeed_consumer_health")
#: The publishing runs' time hints: round 2's clock is behind round 1's.
HINTS = {1: 1_700_000_000_000, 2: 1_699_999_000_000}
VARS = {"changefeed_spark_it": True, "changefeed_health_models": True}
SLOW = {"CF_TEST_ROW_SLEEP_MS": "400"}


def landed_rows(batch: int) -> list[list[Any]]:
    """Batch ``batch`` of the landed feed: 3 events on each of shards 0 and 1."""
    rows = []
    for shard in (0, 1):
        for j in range(3):
            ulid = (1_600_000_000_000 + batch * 1000).to_bytes(6, "big") + b"\x00\x01"
            ulid += (shard * 100 + j).to_bytes(8, "big")
            status = ("new", "shipped", "cancelled")[(batch + j) % 3]
            rows.append([shard, ulid.hex(), batch * 10 + shard * 3 + j, status])
    return rows


SHOP_WAVES = {
    1: [(1, "new", "10.50", 0), (2, "new", "3.00", 1), (3, "new", "4.25", 1), (4, "new", "1", 0)],
    2: [(1, "shipped", "10.50", 0), (5, "new", "7", 1), (6, "new", "8", 1), (7, "new", "2", 0)],
}


def shop_wave(schema: str, wave: int) -> str:
    """The source rows that publishing run ``wave`` picks up."""
    rows = ", ".join(
        f"({o}, '{s}', {a}, timestamp'2024-01-0{wave} 00:00:0{i}', {r})"
        for i, (o, s, a, r) in enumerate(SHOP_WAVES[wave])
    )
    return f"insert into {schema}.shop_orders values {rows}"


def setup_steps(schema: str) -> list[dict[str, Any]]:
    return [
        {"sql": f"create database if not exists {schema}"},
        {
            "sql": f"create table {schema}.shop_orders (order_id bigint, status string, "
            "amount decimal(10,2), updated_at timestamp, region int) using parquet"
        },
    ]


def data_steps(schema: str, n: int) -> list[dict[str, Any]]:
    """Round ``n``'s new data: a landed batch and new source rows."""
    return [
        {"land": {"table": f"{schema}.{LANDED}", "rows": landed_rows(n)}},
        {"sql": shop_wave(schema, n)},
    ]


def run_step(
    schema: str, n: int, *select: str, env: dict[str, str] | None = None, full_refresh: bool = False
) -> dict[str, Any]:
    """``dbt run`` of round ``n`` (its time hint) for ``select`` (default: every model)."""
    args = ["run", *(["--full-refresh"] if full_refresh else []), "--select"]
    return {
        "dbt": [*args, *(select or MODELS)],
        "schema": schema,
        "env": {"CF_TEST_TIME_HINT_MS": str(HINTS[n]), "CF_TEST_ROW_SLEEP_MS": "0", **(env or {})},
    }


def dump_step(out: str, schema: str, *tables: str) -> dict[str, Any]:
    return {"dump": {"out": out, "tables": [f"{schema}.{t}" for t in (tables or MODELS)]}}


_SCENARIOS: dict[str, dict[str, Any]] = {}


def dumped_rows(dump: dict[str, Any], schema: str, table: str) -> Counter[tuple[Any, ...]]:
    """The rows of one table of a scenario dump, as a multiset."""
    data = dump[f"{schema}.{table}"]
    assert data is not None, f"{schema}.{table} does not exist"
    return Counter(tuple(r) for r in data["rows"])


def kill_scenario(root: Path) -> dict[str, Any]:
    """Run the kill scenario once per test session (memoised on ``root``): a resident
    driver runs every uninterrupted step, and three runs in KILL each run in a fresh
    driver that is killed, all sharing one warehouse and metastore.

    * The uninterrupted baseline in BASE (2 rounds, then the health and full-refresh
      checks); then round 1 in KILL up to the consumer, whose first run is killed while it
      writes (k1).
    * Round 1 re-run; round 2's publishing run killed while its write job runs (p1).
    * The publishing run re-run; round 2's consumer run killed while it writes (k2).
    * (the test process makes an unregistered partition directory, see below)
    * Round 2 re-run; the final dumps.

    Returns {"results": {name: PlanResult}, "dumps": {name: dump}, "workdir", "orphan"}.
    """
    key = str(root)
    if key in _SCENARIOS:
        return _SCENARIOS[key]
    work = root / "work"
    plan = {"schema": KILL, "packages_dir": str(root / "dbt_packages"), "vars": VARS}
    results: dict[str, PlanResult] = {}
    consumer_dir = table_dir(work, KILL, CONSUMER)
    published_dir = table_dir(work, KILL, PUBLISHED)
    pub_consumer_dir = table_dir(work, KILL, PUB_CONSUMER)
    orphan = pub_consumer_dir / "changefeed_batch=2"

    with Resident(work, plan) as resident:

        def killed(name: str, step: dict[str, Any], when: Any) -> None:
            results[name] = run_plan(work, {**plan, "steps": [step]}, kill_when=when)

        steps = [*setup_steps(BASE)]
        for n in (1, 2):
            steps += [*data_steps(BASE, n), run_step(BASE, n)]
        steps += [
            {"dbt": ["test", "--select", "test_type:unit"], "schema": BASE, "name": "unit tests"},
            dump_step("base.json", BASE),
            # Health: land a 3rd batch and run only CONSUMER, so SHORT lags behind.
            {"land": {"table": f"{BASE}.{LANDED}", "rows": landed_rows(3)}},
            run_step(BASE, 2, CONSUMER),
            {"dbt": ["run", "--select", *HEALTH], "schema": BASE},
            dump_step("health.json", BASE, *HEALTH, LANDED, *MODELS),
            run_step(BASE, 2, CONSUMER, full_refresh=True),
            dump_step("base_full_refresh.json", BASE, CONSUMER),
            *setup_steps(KILL),
            *data_steps(KILL, 1),
        ]
        results["base"] = resident.run(steps)
        killed("k1", run_step(KILL, 1, CONSUMER, env=SLOW),
               lambda: written_parts(work, 0, consumer_dir))  # fmt: skip

        results["round_1"] = resident.run([
            dump_step("after_k1.json", KILL, *KILL_MODELS),
            run_step(KILL, 1, *KILL_MODELS),
            *data_steps(KILL, 2),
        ])  # fmt: skip
        killed("p1", run_step(KILL, 2, PUBLISHED, env=SLOW),
               lambda: staging_started(work, 0, published_dir))  # fmt: skip

        results["published"] = resident.run([dump_step("after_p1.json", KILL, *KILL_MODELS),
                                             run_step(KILL, 2, PUBLISHED)])  # fmt: skip
        killed("k2", run_step(KILL, 2, CONSUMER, env=SLOW),
               lambda: written_parts(work, 0, consumer_dir))  # fmt: skip

        # The state of a kill between a partition directory's rename and its registration,
        # made by hand: an unregistered copy of batch 1 where PUB_CONSUMER's next batch (2)
        # will go. If anything ever read it, its rows would be duplicates.
        if (pub_consumer_dir / "changefeed_batch=1").is_dir() and not orphan.exists():
            import shutil

            shutil.copytree(pub_consumer_dir / "changefeed_batch=1", orphan)

        results["final"] = resident.run([
            dump_step("after_k2.json", KILL, *KILL_MODELS),
            run_step(KILL, 2, *KILL_MODELS),
            dump_step("final.json", KILL, *KILL_MODELS),
        ])  # fmt: skip

    scenario = {"results": results, "dumps": read_dumps(work), "workdir": work, "orphan": orphan}
    _SCENARIOS[key] = scenario
    return scenario
