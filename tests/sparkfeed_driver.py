"""Run dbt-spark (session method) in a process of its own, for the Spark kill tests.

``python tests/sparkfeed_driver.py PLAN.json`` starts a local Spark with a Derby Hive
metastore in ``plan["workdir"]/warehouse`` (so that a later process sees what an
earlier, killed one committed), then runs the plan's steps in order and appends one JSON
line per finished step to ``plan["workdir"]/steps.jsonl``:

* ``{"sql": "..."}`` runs a statement.
* ``{"land": {"table": "s.t", "rows": [[shard, "ULID hex", order_id, "status"], ...]}}``
  writes one batch of a landed feed with :func:`changefeed.sparkfeed.write_batch`.
* ``{"dbt": [args...], "env": {...}, "expect_error": "text"}`` runs dbt in-process
  against ``integration_tests/`` (its failure fails the plan unless expected).
* ``{"dump": {"out": "name.json", "tables": ["s.t", ...]}}`` writes each table's rows
  (binary as hex; missing tables as null) to ``workdir/name.json``.
* ``{"pause_before": "regex"}`` / ``{"pause_after": "regex"}``: from now on, the first
  Spark statement matching the regex writes ``workdir/paused`` (its text) before /
  after it runs, and then the process sleeps until the test kills it.

The test kills the whole process group (this Python process and its Spark JVM) with
SIGKILL, which is what a lost node or an OOM kill does.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

PROFILE = "changefeed_integration_tests"


def _profiles(workdir: Path, schema: str) -> Path:
    import yaml

    directory = workdir / "profiles"
    directory.mkdir(exist_ok=True)
    output = {"type": "spark", "method": "session", "host": "localhost", "schema": schema,
              "threads": 1}  # fmt: skip
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
    out: dict[str, Any] = {}
    for table in tables:
        if not spark.catalog.tableExists(table):
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

    from changefeed.sparkfeed import write_batch

    schema = StructType([
        StructField("shard_id", IntegerType(), False),
        StructField("ulid", BinaryType(), False),
        StructField("order_id", LongType(), False),
        StructField("status", StringType(), True),
    ])  # fmt: skip
    rows = [(int(s), bytes.fromhex(u), int(o), st) for s, u, o, st in spec["rows"]]
    return write_batch(spark, spec["table"], spark.createDataFrame(rows, schema))


def _dbt(workdir: Path, plan: dict[str, Any], profiles: Path, step: dict[str, Any]) -> str | None:
    from dbt.cli.main import dbtRunner

    env = {
        "CHANGEFEED_DBT_PACKAGES_DIR": plan["packages_dir"],
        "DBT_TARGET_PATH": str(workdir / "target"),
        **step.get("env", {}),
    }
    os.environ.update(env)
    args = [*step["dbt"],
            "--project-dir", str(REPO / "integration_tests"),
            "--profiles-dir", str(profiles),
            "--target", "spark",
            "--log-path", str(workdir / "logs"),
            "--no-version-check"]  # fmt: skip
    if step["dbt"][0] not in ("deps", "clean"):
        args += ["--vars", json.dumps(plan.get("vars", {}))]
    result = dbtRunner().invoke(args)
    if result.success:
        return None
    messages = [str(result.exception)] if result.exception else []
    for item in getattr(result.result, "results", None) or []:
        if getattr(item, "status", None) in ("error", "fail"):
            messages.append(str(getattr(item, "message", item)))
    return "\n".join(messages) or "dbt failed"


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    workdir = Path(plan["workdir"])
    os.chdir(workdir)  # derby.log and spark-warehouse debris stay in the workdir
    from changefeed.local_spark import local_spark_session

    spark = local_spark_session("changefeed-kill-test", warehouse_dir=workdir / "warehouse",
                                hive=True)  # fmt: skip
    profiles = _profiles(workdir, plan["schema"])
    log = workdir / "steps.jsonl"
    if not (Path(plan["packages_dir"]) / "changefeed").exists():
        _dbt(workdir, plan, profiles, {"dbt": ["deps"]})
    for index, step in enumerate(plan["steps"]):
        started = time.monotonic()
        record: dict[str, Any] = {"index": index, "step": next(iter(step))}
        try:
            if "sql" in step:
                spark.sql(step["sql"]).collect()
            elif "land" in step:
                record["batch"] = _land(spark, step["land"])
            elif "dbt" in step:
                error = _dbt(workdir, plan, profiles, step)
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
            elif "pause_before" in step:
                _pause_hook(step["pause_before"], False, workdir / "paused")
            elif "pause_after" in step:
                _pause_hook(step["pause_after"], True, workdir / "paused")
            else:
                raise ValueError(f"unknown step {step}")
        except Exception:
            record["failed"] = traceback.format_exc()
            with log.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            sys.exit(1)
        record["seconds"] = round(time.monotonic() - started, 2)
        with log.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
