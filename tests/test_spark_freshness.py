"""``dbt source freshness`` of a landed feed (docs/spark.md, Landed feeds), on dbt-spark.

The source ``cf_spark.landed_freshness`` (integration_tests/models/spark/cf_spark_sources.yml)
has the documented declaration (checked below) and takes its ``loaded_at_field`` from the
time of the ULID: a batch whose newest event is two days old makes freshness fail, one two
hours old warns, one a minute old passes.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.dbt_harness import SCHEMA, DbtError
from tests.support.doc_blocks import sample

from changefeed.spark.feedtable import write_batch

pytestmark = pytest.mark.spark

TABLE = f"{SCHEMA}.landed_freshness"
REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "integration_tests" / "models" / "spark" / "cf_spark_sources.yml"


def _for_this_project(command: str) -> list[str]:
    """docs/spark.md's command, for this project's source."""
    argv = shlex.split(command)
    assert argv[:3] == ["dbt", "source", "freshness"]
    return [a.replace("landing.orders_feed", "cf_spark.landed_freshness") for a in argv[1:]]


def test_the_documented_declaration_is_the_tested_one() -> None:
    (documented,) = yaml.safe_load(sample("spark-freshness"))["sources"][0]["tables"]
    (project,) = yaml.safe_load(SOURCES.read_text())["sources"]
    (tested,) = [t for t in project["tables"] if t["name"] == "landed_freshness"]
    assert tested["config"] == documented["config"]
    assert set(documented["config"]) == {"loaded_at_field", "freshness"}


def _land_event_of_age(spark: Any, seconds: float) -> None:
    """One batch of one event whose ULID time lies ``seconds`` in the past."""
    ms = int((time.time() - seconds) * 1000)
    ulid = ms.to_bytes(6, "big") + os.urandom(10)
    events = spark.createDataFrame([(0, bytearray(ulid), 1)], "shard_id int, ulid binary, id int")
    assert write_batch(spark, TABLE, events) > 0


def _freshness(dbt: Any, command: list[str]) -> tuple[str, float]:
    warnings: list[str] = []
    result = dbt.invoke(command, target="spark", on_warning=warnings.append)
    # The declaration is dbt 1.10+'s (under config:), with nothing deprecated.
    assert not [w for w in warnings if "deprecat" in w.lower()], warnings
    # (a package's on-run-end hook, changefeed's among them, is a result of its own)
    (outcome,) = [r for r in result.result.results if r.node.resource_type == "source"]
    return str(outcome.status), float(outcome.age)


def test_landed_feed_freshness(spark: Any, dbt: Any) -> None:
    command = _for_this_project(sample("spark-freshness-command"))
    spark.sql(f"create database if not exists {SCHEMA}")
    spark.sql(f"drop table if exists {TABLE}")
    _land_event_of_age(spark, 2 * 86400)
    with pytest.raises(DbtError, match=r"ERROR STALE freshness of cf_spark\.landed_freshness"):
        dbt.invoke(command, target="spark")

    _land_event_of_age(spark, 2 * 3600)
    status, age = _freshness(dbt, command)
    assert status == "warn"
    assert 2 * 3600 - 60 < age < 2 * 3600 + 600

    _land_event_of_age(spark, 60)
    status, age = _freshness(dbt, command)
    assert status == "pass"
    assert 0 < age < 600
