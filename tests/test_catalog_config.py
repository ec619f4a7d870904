"""How the CLI finds the shared catalog (changefeed.local.catalog), without starting it:
SPARK_CONF_DIR and the marker of the file ``changefeed catalog init`` writes, and the
errors that name the fix. tests/test_shared_catalog.py runs the catalog for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from changefeed.cli import CliError, main
from changefeed.cli.catalog import shared_catalog
from changefeed.local import catalog


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
    # (a catalog.json of before warehouses could be URIs: an absolute path, read as such)
    assert found == catalog.Catalog(directory=tmp_path, warehouse=str(tmp_path / "wh"), port=5)
    assert found.jdbc_url == "jdbc:postgresql://127.0.0.1:5/metastore"


def test_no_or_a_foreign_spark_conf_dir_keeps_derby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    assert catalog.configured() is None
    monkeypatch.setenv("SPARK_CONF_DIR", str(_catalog_dir(tmp_path, marker=False)))
    assert catalog.configured() is None
    assert shared_catalog("spark-warehouse") is None


def test_the_default_directory_is_found_from_below(tmp_path: Path) -> None:
    """dbt's plugin looks for `.changefeed/catalog` (init's default `--dir`) in a project's
    directory and its parents, and takes the nearest that holds a catalog."""
    outer = tmp_path / catalog.DEFAULT_DIR
    _catalog_dir(outer)
    project = tmp_path / "work" / "shop_analytics"
    project.mkdir(parents=True)
    assert catalog.found_above(project) == catalog.load(outer)
    inner = tmp_path / "work" / catalog.DEFAULT_DIR
    _catalog_dir(inner)
    assert catalog.found_above(project).directory == inner  # type: ignore[union-attr]
    (inner / "catalog.json").unlink()  # a directory without a catalog is not one
    assert catalog.found_above(project).directory == outer  # type: ignore[union-attr]
    message = catalog.unset_message(catalog.load(outer))
    assert message.startswith("SPARK_CONF_DIR is not set") and "\n" not in message
    assert f"export SPARK_CONF_DIR={outer / 'conf'}" in message


def test_warehouse_next_to_a_shared_catalog_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(_catalog_dir(tmp_path)))
    with pytest.raises(CliError, match="leave out --warehouse, or unset SPARK_CONF_DIR"):
        shared_catalog("elsewhere")
    assert shared_catalog(None) == catalog.configured()


def _fake_jars(where: Path, *names: str) -> None:
    """Empty files named as `make jars` names them: the jar checks look at names only."""
    where.mkdir()
    for name in ("postgresql-42.7.8.jar", "delta-spark_4.1_2.13-4.4.0.jar",
                 "delta-storage-4.4.0.jar", "iceberg-spark-runtime-4.1_2.13-1.12.0.jar",
                 *names):  # fmt: skip
        (where / name).touch()


def test_an_object_store_warehouse_is_kept_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert catalog._location("s3a://bucket/wh/") == "s3a://bucket/wh"
    assert catalog._location("wh") == str(tmp_path / "wh")
    _fake_jars(tmp_path / "jars", "hadoop-aws-3.4.2.jar")
    monkeypatch.setenv("CHANGEFEED_JARS", str(tmp_path / "jars"))
    shared = catalog.Catalog(tmp_path / "cat", "s3a://bucket/wh", 5)
    conf = shared.spark_conf()
    assert conf["spark.sql.warehouse.dir"] == "s3a://bucket/wh"
    assert conf["spark.sql.catalog.iceberg.warehouse"] == "s3a://bucket/wh/iceberg"
    # Another warehouse for an existing catalog is refused before anything starts.
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "catalog.json").write_text(
        json.dumps({"warehouse": "s3a://bucket/wh", "port": 5})
    )
    with pytest.raises(catalog.CatalogError, match=(
        r"keeps its tables in s3a://bucket/wh, not s3a://bucket/other: leave out --warehouse"
    )):  # fmt: skip
        catalog.init(tmp_path / "cat", warehouse="s3a://bucket/other")


def test_an_s3a_warehouse_without_the_connector_names_make_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_jars(tmp_path / "jars")
    monkeypatch.setenv("CHANGEFEED_JARS", str(tmp_path / "jars"))
    with pytest.raises(catalog.CatalogError, match=(
        r"Hadoop's S3A connector for s3a:// locations \(hadoop-aws-\*\.jar\) is not in "
        r".*; run `make jars` \(Maven fetches it from jars/s3a/pom.xml\)"
    )):  # fmt: skip
        catalog.init(tmp_path / "cat", warehouse="s3a://bucket/wh")
    assert not (tmp_path / "cat" / "catalog.json").exists()


def test_init_rewrites_its_settings_and_keeps_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is below the file's last comment survives a rewrite, and wins over the same
    key above it (as in Spark's own reading of the file: a later line wins)."""
    _fake_jars(tmp_path / "jars", "hadoop-aws-3.4.2.jar")
    monkeypatch.setenv("CHANGEFEED_JARS", str(tmp_path / "jars"))
    shared = catalog.Catalog(tmp_path, "s3a://bucket/wh", 5)
    catalog.write_conf(shared)
    conf_file = tmp_path / "conf" / catalog.CONF_FILE
    assert conf_file.read_text().endswith(catalog.USER_SECTION + "\n")
    assert shared.user_conf() == {}
    mine = ("spark.hadoop.fs.s3a.endpoint http://127.0.0.1:9000\n"
            "# a comment of mine\nspark.master=local[1]\nspark.driver.memory: 1g\n")  # fmt: skip
    with conf_file.open("a") as out:
        out.write(mine)
    conf_file.write_text(conf_file.read_text().replace("local[2]", "local[3]", 1))
    catalog.write_conf(catalog.Catalog(tmp_path, "s3a://bucket/wh", 6))
    text = conf_file.read_text()
    assert text.endswith(f"{catalog.USER_SECTION}\n{mine}")
    assert "local[3]" not in text and "127.0.0.1:6/metastore" in text
    assert shared.user_conf() == {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
                                  "spark.master": "local[1]", "spark.driver.memory": "1g"}
    assert not (tmp_path / "conf" / (catalog.CONF_FILE + ".partial")).exists()


def test_an_object_store_warehouse_needs_the_shared_catalog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    with pytest.raises(CliError, match=(
        r"--warehouse s3a://bucket/wh is not a local directory.*changefeed catalog init "
        r"--warehouse s3a://bucket/wh\) and export its SPARK_CONF_DIR"
    )):  # fmt: skip
        shared_catalog("s3a://bucket/wh")


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
        shared = catalog.Catalog(tmp_path, str(tmp_path / "warehouse"), server.getsockname()[1])
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
