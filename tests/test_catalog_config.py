"""How the CLI finds the shared catalog (changefeed.catalog), without starting it:
SPARK_CONF_DIR and the marker of the file ``changefeed catalog init`` writes, and the
errors that name the fix. tests/test_shared_catalog.py runs the catalog for real."""

from __future__ import annotations

import json
from pathlib import Path

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
