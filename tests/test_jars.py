"""changefeed.local.jars: where the Delta Lake and Iceberg jars are looked for, and the error
that names the fix when they are missing (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from changefeed.local import jars

JARS = ("delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar",
        "iceberg-spark-runtime-4.1_2.13-1.12.0.jar")  # fmt: skip


def test_missing_jars_name_make_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jars.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(jars.LakehouseJarsMissing, match=r"run `make jars`.*CHANGEFEED_JARS"):
        jars.lakehouse_jars("4.1.4")
    (tmp_path / "nowhere").mkdir()
    (tmp_path / "nowhere" / JARS[0]).touch()
    with pytest.raises(jars.LakehouseJarsMissing, match=r"Delta Lake \(delta-storage-\*\.jar\)"):
        jars.lakehouse_jars("4.1.4")


def test_every_jar_of_the_directory_goes_on_spark_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*JARS, "delta-kernel-api-4.4.0.jar"):
        (tmp_path / name).touch()
    monkeypatch.setenv(jars.ENV_VAR, str(tmp_path))
    found = jars.lakehouse_jars("4.1.4")
    assert [j.name for j in found] == sorted([*JARS, "delta-kernel-api-4.4.0.jar"])
    conf = jars.lakehouse_conf(found, tmp_path / "wh")
    assert conf["spark.jars"].split(",") == [str(j) for j in found]
    assert conf["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    assert conf[f"spark.sql.catalog.{jars.ICEBERG_CATALOG}.warehouse"] == str(
        tmp_path / "wh" / "iceberg"
    )


def test_default_directory_is_the_repos_jars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jars.ENV_VAR, raising=False)
    assert jars.jars_dir() == Path(__file__).resolve().parents[1] / ".jars"


def test_jars_for_another_spark_minor_name_the_pyspark_to_install(tmp_path: Path) -> None:
    with pytest.raises(
        jars.LakehouseJarsMissing, match=r"built for Spark 4\.1.*pyspark is 4\.3\.0"
    ):
        jars.lakehouse_jars("4.3.0")
