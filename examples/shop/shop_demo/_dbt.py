"""Run a dbt project in-process (``dbtRunner``) with a generated ``profiles.yml``.

The demo's two projects (examples/shop/oltp for dbt-postgres, examples/shop/analytics
for dbt-spark) are run exactly as a user would run them, except that the profile is
written by the demo: the embedded PostgreSQL server, and dbt-spark's ``session`` method,
which reuses the demo's running SparkSession. Package installs, targets and logs go to
the state directory, so the example projects stay clean.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from shop_demo._errors import DemoError


def postgres_output(uri: str, schema: str) -> dict[str, Any]:
    """A dbt-postgres profile output for a libpq URI (also pgserver's ``?host=/dir``).

    >>> postgres_output("postgresql://postgres:@/postgres?host=/tmp/pg", "shop")["host"]
    '/tmp/pg'
    """
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "localhost"])[0]
    return {
        "type": "postgres",
        "host": host,
        "port": parts.port or 5432,
        "user": urllib.parse.unquote(parts.username or "postgres"),
        "password": urllib.parse.unquote(parts.password or ""),
        "dbname": parts.path.lstrip("/") or "postgres",
        "schema": schema,
        "threads": 1,
    }


def spark_session_output(schema: str, threads: int = 2) -> dict[str, Any]:
    """dbt-spark's ``session`` method: ``SparkSession.builder.getOrCreate()``."""
    return {
        "type": "spark",
        "method": "session",
        "host": "localhost",
        "schema": schema,
        "threads": threads,
    }


class DbtProject:
    """One dbt project, its generated profile and its own package/target/log dirs."""

    def __init__(
        self, project_dir: Path, work_dir: Path, profile: str, output: dict[str, Any]
    ) -> None:
        self.project_dir = project_dir
        self.work_dir = work_dir
        self.profile = profile
        self.work_dir.mkdir(parents=True, exist_ok=True)
        profiles = {profile: {"target": "demo", "outputs": {"demo": output}}}
        # JSON is YAML: no YAML library needed to write it.
        (self.work_dir / "profiles.yml").write_text(json.dumps(profiles, indent=2))
        self._deps_done = False

    def invoke(
        self,
        args: Sequence[str],
        *,
        on_log: Callable[[str], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> Any:
        """Run ``dbt <args>``; raise :class:`DemoError` with dbt's message on failure.
        ``on_warning`` receives every warning dbt fires (deprecations included)."""
        from dbt.cli.main import dbtRunner

        if not self._deps_done:
            self._deps_done = True
            self.invoke(["deps"])
        problems: list[str] = []

        def callback(msg: Any) -> None:
            name = msg.info.name
            if name in ("JinjaLogInfo", "JinjaLogDebug") and on_log is not None:
                on_log(msg.data.msg)
            elif msg.info.level == "error":
                problems.append(msg.info.msg)
            elif msg.info.level == "warn" and on_warning is not None:
                on_warning(msg.info.msg)

        with self._environment():
            result = dbtRunner(callbacks=[callback]).invoke([*args, *self._common_args()])
        if not result.success:
            raise DemoError(
                f"dbt {' '.join(args[:2])} failed in {self.project_dir}: "
                + _failure_text(result, problems)
            )
        return result

    def _common_args(self) -> list[str]:
        return [
            "--project-dir",
            str(self.project_dir),
            "--profiles-dir",
            str(self.work_dir),
            "--target",
            "demo",
            "--log-path",
            str(self.work_dir / "logs"),
            "--log-level",
            "none",
            "--log-level-file",
            "info",
            "--no-version-check",
            "--no-use-colors",
        ]

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        # The example projects read CHANGEFEED_DBT_PACKAGES_DIR; DBT_TARGET_PATH because
        # `dbt deps` does not accept --target-path.
        values = {
            "CHANGEFEED_DBT_PACKAGES_DIR": str(self.work_dir / "dbt_packages"),
            "DBT_TARGET_PATH": str(self.work_dir / "target"),
        }
        previous = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _failure_text(result: Any, problems: list[str]) -> str:
    if result.exception is not None:
        text = str(result.exception)
    else:
        errors = [
            f"{getattr(getattr(r, 'node', None), 'name', '?')}: {getattr(r, 'message', r)}"
            for r in getattr(result.result, "results", []) or []
            if getattr(r, "status", None) in ("error", "fail")
        ]
        text = "\n".join(errors) or "dbt failed without an exception"
    if problems:
        text += "\n" + "\n".join(problems[-5:])
    return text
