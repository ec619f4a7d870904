"""Set-up shared by the tests that run several processes on one shared catalog
(``changefeed catalog init``): the documented init and profile, and a dbt source of a
landed table."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
#: The profile name of tests/support/dbt_harness.package_project.
PROFILE = "changefeed_integration_tests"
CLI = [sys.executable, "-m", "changefeed.cli"]


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
