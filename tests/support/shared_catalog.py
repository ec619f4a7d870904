"""Set-up shared by the tests that run several processes on one shared catalog
(``changefeed catalog init``): the documented init and profile, and a dbt source of a
landed table."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
#: The profile name of tests/support/dbt_harness.package_project.
PROFILE = "changefeed_integration_tests"
CLI = [sys.executable, "-m", "changefeed.cli"]

#: The start of a dbt process's script (``python -c SCRIPT WORK PROJECT``): ``dbt(*args)``
#: runs dbt on the project with the profile and logs of the work directory and ends the
#: process naming a failure; ``dbt("deps")`` has run.
DBT_PROCESS_HEAD = """
import json, sys, time
from pathlib import Path
from dbt.cli.main import dbtRunner

work, project = Path(sys.argv[1]), sys.argv[2]
common = ["--project-dir", project, "--profiles-dir", str(work), "--log-path",
          str(work / "logs"), "--no-version-check"]
def dbt(*args):
    result = dbtRunner().invoke([*args, *common])
    if not result.success:
        raise SystemExit(f"dbt {args} failed: {result.exception or result.result}")
dbt("deps")
"""


def landed_source(schema: str, table: str = "landed_orders") -> str:
    """A ``sources.yml`` with the landed table ``schema.table`` as source ``landed``."""
    return f"""version: 2
sources:
  - name: landed
    schema: {schema}
    tables:
      - name: {table}
        meta:
          changefeed_feed: true
"""


def landed_consumer(table: str) -> str:
    """An incremental consumer of source ``landed``'s ``table`` (source :func:`landed_source`):
    each event once, its batch and the consumer's own, up to the safe point and from its
    cursor."""
    return f"""{{{{ config(materialized='incremental',
    incremental_strategy='insert_overwrite', partition_by=['changefeed_batch'],
    file_format='parquet') }}}}
select e.shard_id, e.ulid, e.id, e.changefeed_batch as changefeed_feed_batch,
    {{{{ changefeed.feed_batch() }}}} as changefeed_batch
from {{{{ source('landed', '{table}') }}}} as e
where {{{{ changefeed.feed_safe_point(source('landed', '{table}'), 'e') }}}}
{{% if is_incremental() %}}
  and {{{{ changefeed.feed_cursor('e') }}}}
{{% endif %}}
"""


def process_env() -> dict[str, str]:
    """The environment of a test's processes: this checkout importable, no catalog yet."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'python'}{os.pathsep}{REPO}"}
    env.pop("SPARK_CONF_DIR", None)
    return env


def init_catalog(documented: str, env: dict[str, str], cwd: Path) -> Path:
    """Run the documented ``changefeed catalog init`` (``documented``: the page's block
    ``shared-catalog-init``) in ``cwd``, set ``SPARK_CONF_DIR`` in ``env`` as its export
    does, and return that directory."""
    command, export = documented.strip().splitlines()
    init = subprocess.run([*CLI, *shlex.split(command)[1:]], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert init.returncode == 0, init.stderr[-3000:]
    conf_dir = Path(export.removeprefix("export SPARK_CONF_DIR=").replace("$PWD", str(cwd)))
    assert f"export SPARK_CONF_DIR={conf_dir}" in init.stdout
    env["SPARK_CONF_DIR"] = str(conf_dir)
    return conf_dir


def write_profile(documented: str, profiles_dir: Path, schema: str) -> None:
    """The documented profile (``documented``: the page's block ``shared-catalog-profiles``),
    under the test projects' profile name and ``schema``."""
    (profile_doc,) = yaml.safe_load(documented).values()
    output = {**profile_doc["outputs"][profile_doc["target"]], "schema": schema}
    profile = {"target": "spark", "outputs": {"spark": output}}
    (profiles_dir / "profiles.yml").write_text(yaml.safe_dump({PROFILE: profile}))


def wait_for(
    predicate: Any, what: str, timeout: float, procs: list[subprocess.Popen[str]]
) -> None:
    """Until ``predicate()``; the test fails if one of ``procs`` exits first, or after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args[:4]} exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.2)


def log_text(path: Path) -> str:
    """A process's log so far ("" before it is created)."""
    return path.read_text() if path.exists() else ""


def shell(text: str, env: dict[str, str], cwd: Path) -> str:
    """``text`` (a page's commands) in bash, ``changefeed`` being this checkout's; its
    standard output."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", text], cwd=cwd,
                          env={**env, "PATH": path}, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, f"{text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout
