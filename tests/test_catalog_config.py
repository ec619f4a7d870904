"""How the CLI finds the shared catalog (changefeed.catalog), without starting it:
SPARK_CONF_DIR and the marker of the file ``changefeed catalog init`` writes, and the
errors that name the fix. tests/test_shared_catalog.py runs the catalog for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from changefeed import catalog
from changefeed.cli import CliError, main
from changefeed.cli.catalog import shared_catalog


def _catalog_dir(root: Path, marker: bool = True) -> Path:
    """What init leaves behind: catalog.json and conf/spark-defaults.conf."""
    (root / "conf").mkdir(parents=True)
    (root / "catalog.json").write_text(json.dumps({"warehouse": str(root / "wh"), "port": 5}))
    lines = [f"{catalog.MARKER} {root}"] if marker else []
    lines.append("spark.sql.shuffle.partitions 4")
    (root / "conf" / catalog.CONF_FILE).write_text("\n".join(lines) + "\n")
    return root / "conf"


def test_spark_conf_dir_with_the_marker_is_the_shared_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(_catalog_dir(tmp_path)))
    found = catalog.configured()
    assert found == catalog.Catalog(directory=tmp_path, warehouse=tmp_path / "wh", port=5)
    assert found.jdbc_url == "jdbc:postgresql://127.0.0.1:5/metastore"


def test_no_or_a_foreign_spark_conf_dir_keeps_derby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert catalog.configured() is None
    monkeypatch.setenv("SPARK_CONF_DIR", str(_catalog_dir(tmp_path, marker=False)))
    assert catalog.configured() is None
    assert shared_catalog("spark-warehouse") is None


def test_warehouse_next_to_a_shared_catalog_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(_catalog_dir(tmp_path)))
    with pytest.raises(CliError, match="leave out --warehouse, or unset SPARK_CONF_DIR"):
        shared_catalog("elsewhere")
    assert shared_catalog(None) == catalog.configured()


def test_stop_without_a_catalog_names_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["catalog", "stop", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "holds no shared catalog" in err
    assert f"changefeed catalog init --dir {tmp_path}" in err


def test_a_spark_start_says_so_on_a_terminal_only(tmp_path: Path) -> None:
    """spark-env.sh, as Spark's launcher sources it, with the catalog's server up: one
    line when standard error is a terminal (a dbt run was silent for the seconds of its
    Spark start), nothing into a pipe or a log file (issue 33)."""
    import os
    import socket
    import subprocess

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        shared = catalog.Catalog(tmp_path, tmp_path / "warehouse", server.getsockname()[1])
        script = tmp_path / "spark-env.sh"
        script.write_text(catalog.launcher_script(shared, python="/nowhere/python"))
        command = ["bash", "-c", f". {script}"]

        piped = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert piped.returncode == 0 and piped.stderr == "", piped.stderr

        # (an in-process CLI test may have set it in this process's environment)
        quiet = {k: v for k, v in os.environ.items() if k != catalog.ANNOUNCED}
        seen = {
            announced: on_a_terminal(command, {**quiet, catalog.ANNOUNCED: "1"} if announced
                                     else quiet)
            for announced in (False, True)
        }  # fmt: skip
    assert seen[False] == [catalog.SPARK_STARTING]
    assert seen[True] == [], "a command that said so itself (changefeed land) is not repeated"


def on_a_terminal(command: list[str], env: Any) -> list[str]:
    """The lines ``command`` writes to its standard error, a terminal."""
    import os
    import pty
    import subprocess

    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(command, stderr=terminal, stdout=subprocess.DEVNULL, env=env,
                              timeout=30)  # fmt: skip
        os.close(terminal)
        terminal = -1
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert done.returncode == 0
    return seen.decode().splitlines()
