"""Feed tables read without Spark (changefeed.local.catalog_tables, what ``changefeed status
--consumer`` uses on the shared catalog): a Delta table's committed files from its log,
through a checkpoint, removes and appends, give the heads Spark gives; what it cannot read
exactly is refused. (The metastore and parquet side runs in tests/test_shared_catalog.py,
on a real shared catalog.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.dbt_spark import require_lakehouse

from changefeed.local.catalog_tables import NeedsSpark, delta_files, newest_heads

pytestmark = [pytest.mark.spark]

SCHEMA = "cf_catalog_tables"
COLUMNS = "shard_id int, ulid binary, id bigint, changefeed_batch bigint"


def location(spark: Any, table: str) -> Path:
    detail = spark.sql(f"describe detail {table}").first()
    return Path(str(detail["location"]).removeprefix("file:"))


def spark_heads(spark: Any, table: str) -> dict[int, bytes]:
    rows = spark.sql(f"select shard_id, max(ulid) from {table} group by shard_id").collect()
    return {int(r[0]): bytes(r[1]) for r in rows}


@pytest.fixture(scope="module")
def schema(spark: Any) -> str:
    require_lakehouse(spark)
    spark.sql(f"drop schema if exists {SCHEMA} cascade")
    spark.sql(f"create schema {SCHEMA}")
    return SCHEMA


def test_a_delta_tables_heads_from_its_log_equal_sparks(spark: Any, schema: str) -> None:
    table = f"{schema}.feed"
    spark.sql(f"create table {table} ({COLUMNS}) using delta partitioned by (changefeed_batch) "
              "tblproperties ('delta.checkpointInterval' = '3')")  # fmt: skip
    # Checkpoints at versions 3 and 6, commits after them; shard 1 is absent from the
    # newest batches, so its head is found further back.
    for batch in range(1, 7):
        shard = 1 if batch == 2 else 0
        spark.sql(f"insert into {table} values ({shard}, X'{batch:02x}', {batch}, {batch})")
    spark.sql(f"delete from {table} where changefeed_batch = 6")  # a whole file removed
    root = location(spark, table)
    assert json.loads((root / "_delta_log" / "_last_checkpoint").read_text())["version"] == 6
    files = delta_files(root, table)
    assert sorted(files) == list(range(1, 6))
    assert all(f.is_file() for paths in files.values() for f in paths)
    want = spark_heads(spark, table)
    assert want == {0: bytes([5]), 1: bytes([2])}
    assert newest_heads(files, [0, 1]) == want
    assert newest_heads(files, [0]) == {0: bytes([5])}  # stops at the newest batch


@pytest.mark.parametrize(
    ("properties", "change", "reason"),
    [
        ("'delta.enableDeletionVectors' = 'true'", "delete from {t} where id = 1",
         "has deletion vectors"),
        ("'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
         "'delta.minWriterVersion' = '5'", "", r"uses column mapping \(name\)"),
    ],
)  # fmt: skip
def test_what_the_log_cannot_say_exactly_is_refused(
    spark: Any, schema: str, properties: str, change: str, reason: str
) -> None:
    table = f"{schema}.refused_{abs(hash(properties)) % 1000}"
    spark.sql(f"drop table if exists {table}")
    spark.sql(f"create table {table} ({COLUMNS}) using delta partitioned by (changefeed_batch) "
              f"tblproperties ({properties})")  # fmt: skip
    # one file of ten rows: a delete of one of them marks it deleted instead of removing it
    spark.sql(f"insert into {table} select 0, unhex(lpad(hex(id), 2, '0')), id, 1 "
              "from range(0, 10, 1, 1)")  # fmt: skip
    if change:
        spark.sql(change.format(t=table))
    with pytest.raises(NeedsSpark, match=reason):
        delta_files(location(spark, table), table)


def test_a_delta_table_not_partitioned_by_batch_is_left_to_spark(spark: Any, schema: str) -> None:
    """A consumer's output without batch partitions (a merge target): its heads need the
    whole table, which Spark reads."""
    table = f"{schema}.unpartitioned"
    spark.sql(f"drop table if exists {table}")
    spark.sql(f"create table {table} ({COLUMNS}) using delta")
    spark.sql(f"insert into {table} values (0, X'01', 1, 1)")
    with pytest.raises(NeedsSpark, match="is not partitioned by changefeed_batch"):
        delta_files(location(spark, table), table)
