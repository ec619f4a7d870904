"""A landed table follows its source's columns (docs/spark-source.md, "When the source's
columns change"): a column added, dropped, or widened where the format can, on parquet,
Delta and Iceberg, by cold and warm runs and a snapshot, every event exactly once; a
rename, a narrowing or a widening the format cannot do stops the landing before it
writes; columns that change during a run are read by the run's restart."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.dbt_spark import require_lakehouse
from tests.support.doc_blocks import sample

from changefeed.spark.feedtable import BATCH_COLUMN, FeedTable, SchemaVersion
from changefeed.spark.landing import ChangefeedSourceError, Landing, land

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

TABLES = {
    "parquet": "landing_evolution.t_parquet",
    "delta": "landing_evolution.t_delta",
    "iceberg": "iceberg.landing_evolution.t_iceberg",
}


@pytest.fixture(scope="module")
def lakehouse(spark: Any) -> Any:
    return require_lakehouse(spark)


def _sql(uri: str, *statements: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _payloads(spark: Any, table: str) -> dict[tuple[int, int], dict[str, Any]]:
    """(batch, id) -> payload of the table's events (one event per key and batch here)."""
    rows = spark.table(table).collect()
    found = {}
    for row in rows:
        key = (row[BATCH_COLUMN], row.id)
        assert key not in found, key
        found[key] = row.payload.asDict() if row.payload is not None else None
    return found


def _partitions(spark: Any, table: str) -> list[int]:
    return sorted({r[0] for r in spark.table(table).select(BATCH_COLUMN).collect()})


@pytest.mark.slow  # 7-26 s each: left to make test, out of the edit loop
@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_a_landed_table_follows_added_dropped_and_widened_columns(
    lakehouse: Any, pg_uri: str, dbt: Any, fmt: str
) -> None:
    spark, table = lakehouse, TABLES[fmt]
    spark.sql(f"drop table if exists {table}")
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text, n int, x text")
    keys = ["id"]
    kit.write_blocking(pg_uri, feed, 0, [{"id": i, "v": f"v{i}", "n": i, "x": f"x{i}"}
                                         for i in (1, 2, 3)], keys)  # fmt: skip
    options = kit.options(pg_uri, feed, payload="true")
    assert land(spark, options, table, table_format=fmt).batch == 1
    assert FeedTable.for_name(spark, table).schema_versions() == [SchemaVersion(1, 1)]

    widen = fmt != "parquet"  # a parquet table cannot change a column's type in place
    _sql(pg_uri, f"alter table {feed} add column note text", f"alter table {feed} drop column x",
         *([f"alter table {feed} alter column n type bigint"] if widen else []))  # fmt: skip
    big = 3_000_000_000 if widen else 7
    rows = [
        {"id": 2, "v": "v2b", "n": big, "note": "two"},
        {"id": 4, "v": "v4", "n": 4, "note": "four"},
    ]
    kit.write_blocking(pg_uri, feed, 0, rows, keys)
    # A cold run (Spark reads the source) changes the table, then lands batch 2.
    stages: list[tuple[str, Any]] = []
    result = land(spark, options, table, on_stage=lambda at, d: stages.append((at, d)))
    assert (result.batch, result.events) == (2, 2)
    changed = [d for at, d in stages if at == "schema_changed"]
    assert [(d["version"], d["batch"]) for d in changed] == [(2, 2)], stages
    assert "source column note string added" in changed[0]["changes"]
    assert "source column x dropped (kept, null from now on)" in changed[0]["changes"]

    payload = spark.table(table).schema["payload"].dataType
    assert [f.name for f in payload.fields] == ["id", "v", "n", "x", "note"]
    assert payload["n"].dataType.simpleString() == ("bigint" if widen else "int")
    widened = {"n": "int"} if widen else {}
    assert FeedTable.for_name(spark, table).schema_versions() == [
        SchemaVersion(1, 1),
        SchemaVersion(2, 2, ("note",), ("x",), widened),
    ]

    # Warm runs of one Landing (the driver reads; parquet: it writes the files itself)
    # and a snapshot land in the table's shape too.
    landing = Landing(spark, options, table)
    try:
        kit.write_blocking(pg_uri, feed, 0, [{"id": 5, "v": "v5", "n": 5, "note": "five"}], keys)
        assert landing.run().batch == 3
        kit.write_blocking(pg_uri, feed, 0, [{"id": 1, "v": "v1b", "n": 1, "note": "one"}], keys)
        assert landing.run().batch == 4
        _sql(pg_uri, f"delete from {feed} where id = 3")  # no event: the snapshot reads the rows
        dbt.run_operation("changefeed.request_snapshot", {"relation": feed}, target="postgres")
        landed = landing.run()
        assert landed.snapshot_rows == 4, landed
    finally:
        landing.close()

    events = _payloads(spark, table)
    expected_old = {(1, i): {"id": i, "v": f"v{i}", "n": i, "x": f"x{i}", "note": None}
                    for i in (1, 2, 3)}  # fmt: skip
    assert {k: v for k, v in events.items() if k[0] == 1} == expected_old
    assert events[(2, 2)] == {"id": 2, "v": "v2b", "n": big, "x": None, "note": "two"}
    assert events[(2, 4)] == {"id": 4, "v": "v4", "n": 4, "x": None, "note": "four"}
    assert events[(3, 5)] == {"id": 5, "v": "v5", "n": 5, "x": None, "note": "five"}
    assert events[(4, 1)] == {"id": 1, "v": "v1b", "n": 1, "x": None, "note": "one"}
    snapshot = {k[1]: v for k, v in events.items() if k[0] >= 5}
    assert snapshot == {
        1: {"id": 1, "v": "v1b", "n": 1, "x": None, "note": "one"},
        2: {"id": 2, "v": "v2b", "n": big, "x": None, "note": "two"},
        4: {"id": 4, "v": "v4", "n": 4, "x": None, "note": "four"},
        5: {"id": 5, "v": "v5", "n": 5, "x": None, "note": "five"},
    }
    landed_rows = kit.rows_of(spark.table(table).where("changefeed_operation <> 'snapshot'"),
                              "shard_id", "ulid", "id")  # fmt: skip
    assert landed_rows == kit.feed_rows(pg_uri, feed)  # every event once
    # Nothing changed since: no new version. The docs' listing of the versions:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(sample("spark-source-schema-versions").replace("landing.orders_feed", table),
             {"spark": spark})  # fmt: skip
    assert printed.getvalue().splitlines() == ["1 1 () () {}", f"2 2 ('note',) ('x',) {widened}"]


def test_a_rename_a_narrowing_or_a_widening_the_format_cannot_do_stops_the_landing(
    lakehouse: Any, pg_uri: str, dbt: Any
) -> None:
    """Each refusal names the change and the way on, and writes nothing; undone, the
    landing goes on."""
    spark = lakehouse
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text, n bigint")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 1, "v": "a", "n": 1}], ["id"])
    options = kit.options(pg_uri, feed, payload="true")
    parquet, iceberg = "landing_evolution.refusing", "iceberg.landing_evolution.refusing"
    for table in (parquet, iceberg):
        spark.sql(f"drop table if exists {table}")
        assert land(spark, options, table).batch == 1

    def refused(table: str, *changes: str) -> None:
        with pytest.raises(ChangefeedSourceError) as caught:
            land(spark, options, table)
        message = str(caught.value)
        for change in changes:
            assert change in message, message
        assert f"changefeed snapshot --feed {feed} --table {table}_v2" in message, message
        assert _partitions(spark, table) == [1], "nothing written"

    _sql(pg_uri, f"alter table {feed} rename column v to label")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 2, "label": "b", "n": 2}], ["id"])
    refused(parquet, "source column v was renamed to label")
    refused(iceberg, "source column v was renamed to label")
    _sql(pg_uri, f"alter table {feed} rename column label to v")

    _sql(pg_uri, f"alter table {feed} alter column n type int")
    refused(iceberg, "source column n is int now, bigint in the table (a narrowing")
    _sql(pg_uri, f"alter table {feed} alter column n type bigint")

    _sql(pg_uri, f"alter table {feed} alter column v type int using length(v)")
    refused(parquet, "source column v is int now, string in the table (not a widening)")
    _sql(pg_uri, f"alter table {feed} alter column v type text")

    _sql(pg_uri, f"alter table {feed} alter column n type numeric(30, 0)")
    refused(parquet, "source column n is decimal(30,0) now, bigint in the table (not a widening)")
    _sql(pg_uri, f"alter table {feed} alter column n type bigint")
    for table in (parquet, iceberg):
        result = land(spark, options, table)
        assert (result.batch, result.events) == (2, 1)
        assert len(FeedTable.for_name(spark, table).schema_versions()) == 1

    # A table that records no column numbers (landed by 0.2.0) cannot tell a drop and an
    # add from a rename: refused, naming the property that says it is none.
    spark.sql(f"alter table {parquet} unset tblproperties ('changefeed.source.columns')")
    _sql(pg_uri, f"alter table {feed} drop column v", f"alter table {feed} add column w text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 3, "n": 3, "w": "c"}], ["id"])
    with pytest.raises(ChangefeedSourceError) as caught:
        land(spark, options, parquet)
    message = str(caught.value)
    assert (
        "source column(s) v dropped and w added, and the table records no source column "
        "numbers that would tell this from a rename" in message
    ), message
    assert _partitions(spark, parquet) == [1, 2], "nothing written"
    assignment = message.split("set tblproperties (", 1)[1].split("), and land again", 1)[0]
    spark.sql(f"alter table {parquet} set tblproperties ({assignment})")
    assert land(spark, options, parquet).batch == 3
    assert FeedTable.for_name(spark, parquet).schema_versions()[-1] == SchemaVersion(
        2, 3, ("w",), ("v",)
    )


def test_a_widening_a_parquet_table_cannot_do_stops_the_landing(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, n int")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 1, "n": 1}], ["id"])
    options, table = kit.options(pg_uri, feed, payload="true"), "landing_evolution.narrow_p"
    spark.sql(f"drop table if exists {table}")
    land(spark, options, table)
    _sql(pg_uri, f"alter table {feed} alter column n type bigint")
    with pytest.raises(ChangefeedSourceError, match="source column n is bigint now, int in the "
                       r"table \(a parquet table cannot widen a column's type in place; a Delta "
                       "or Iceberg table can\\)"):  # fmt: skip
        land(spark, options, table)


def test_columns_that_change_during_a_run_are_read_by_its_restart(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    """A column added (and a row updated with it) after the run's first look at the
    source's columns and before its safe points: without the second look the batch would
    land that update without the column, and no later event would bring it."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], ["id"])
    options, table = kit.options(pg_uri, feed, payload="true"), "landing_evolution.racing"
    spark.sql(f"drop table if exists {table}")
    landing = Landing(spark, options, table)
    try:
        assert landing.run().batch == 1
        backend = landing._connection()
        describe = backend.describe
        calls = []

        def describe_then_alter(feed_id: str, payload: bool) -> Any:
            found = describe(feed_id, payload)
            calls.append(len(found.payload or ()))
            if len(calls) == 2:  # the run's first look (the first: its snapshot requests)
                _sql(pg_uri, f"alter table {feed} add column late text")
                kit.write_blocking(pg_uri, feed, 0, [{"id": 2, "v": "b2", "late": "L"}], ["id"])
            return found

        backend.describe = describe_then_alter  # type: ignore[method-assign]
        result = landing.run()
    finally:
        landing.close()
    assert (result.batch, result.events) == (2, 1)
    assert _payloads(spark, table)[(2, 2)] == {"id": 2, "v": "b2", "late": "L"}
    # the run's second look saw the new column, so it started again
    assert calls == [2, 2, 3, 3, 3], calls


def test_a_run_killed_between_recording_a_version_and_altering_the_table_completes_it(
    lakehouse: Any, pg_uri: str, dbt: Any
) -> None:
    """The version is recorded first; the table's alter is cut (a statement that fails, as
    a kill would cut it): the next run finds the version recorded for the same batch,
    alters the table and lands, with one version, not two."""
    from tests.support.dbt_spark import failing_at

    spark, table = lakehouse, "iceberg.landing_evolution.cut"
    spark.sql(f"drop table if exists {table}")
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 1, "v": "a"}], ["id"])
    options = kit.options(pg_uri, feed, payload="true")
    assert land(spark, options, table).batch == 1
    _sql(pg_uri, f"alter table {feed} add column note text")
    kit.write_blocking(pg_uri, feed, 0, [{"id": 2, "v": "b", "note": "n"}], ["id"])
    with failing_at(r"alter table \S+ add columns") as hit, pytest.raises(RuntimeError):
        land(spark, options, table)
    assert hit and _partitions(spark, table) == [1]
    assert "note" not in spark.table(table).schema["payload"].dataType.names
    recorded = SchemaVersion(2, 2, ("note",))
    assert FeedTable.for_name(spark, table).schema_versions() == [SchemaVersion(1, 1), recorded]
    assert land(spark, options, table).batch == 2
    assert FeedTable.for_name(spark, table).schema_versions() == [SchemaVersion(1, 1), recorded]
    assert _payloads(spark, table)[(2, 2)] == {"id": 2, "v": "b", "note": "n"}
