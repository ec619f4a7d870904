"""State models without tombstones: ``deletes='remove'`` (docs/spark.md "Deletes").

One scratch project on the shared Spark session consumes one landed feed into a current
state per shape (delta, parquet rewriting its buckets, parquet in layers) and a delta
history, all with ``deletes='remove'``. After each landed batch the models must equal an
independent model of the source: the keys whose newest event is not a delete, each with
that event's row. Batch 3 holds, from a shard that was behind, an event older than a
delete: the state's hidden tombstone must keep that key out of the model.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.dbt_harness import DbtError, package_project
from tests.support.dbt_spark import SCHEMA_MACRO, current_catalog, fresh_projects, run_all
from tests.support.doc_blocks import block

pytestmark = pytest.mark.spark

SOURCE = "cf_del_src"
SCHEMA = "cf_del"
ICEBERG_SCHEMA = "cf_del_iceberg"
#: docs/spark.md's deletes='remove' model (tests/test_docs_samples.py OTHERS)
DOC_MODEL = "7d04dba9998f"
FEED_REF = "api.Relation.create(schema='spark_catalog." + SOURCE + "', identifier='landed')"
T0 = 1_700_000_000_000

#: (shard, seconds after T0, order_id, status; None: the key is gone) per landed batch
BATCHES: dict[int, list[tuple[int, int, int, str | None]]] = {
    1: [(0, 10, 1, "a"), (0, 11, 2, "a"), (1, 12, 3, "a"), (1, 13, 4, "a")],
    # key 2 deleted; key 5 inserted and deleted in the same batch
    2: [(0, 20, 1, "b"), (0, 21, 2, None), (1, 22, 5, "a"), (1, 23, 5, None), (1, 24, 6, "a")],
    # shard 2 was behind: key 2's event is older than its delete and must stay hidden
    3: [(2, 15, 2, "late"), (0, 30, 3, None), (1, 31, 4, "b")],
    # key 2 comes back (newer than its delete)
    4: [(0, 40, 2, "again"), (1, 41, 6, None)],
}

MODELS = {
    "current_delta": ("changefeed_current_state", "file_format='delta'"),
    "current_parquet": ("changefeed_current_state", "file_format='parquet'"),
    "current_layers": ("changefeed_current_state",
                       "file_format='parquet', parquet_layout='layers', max_layers=2"),
    "history_delta": ("changefeed_history", "file_format='delta'"),
}  # fmt: skip
MODEL = """{{{{ config(materialized='{materialization}', unique_key='order_id', buckets=4,
    schema='{schema}', {settings}, deletes='{deletes}') }}}}
select e.shard_id, e.ulid, e.order_id, e.payload, e.changefeed_feed_batch
from {{{{ changefeed.feed_events({feed}, this) }}}} as e
"""


def ulid(shard: int, t: int, key: int) -> bytes:
    return (T0 + t * 1000).to_bytes(6, "big") + bytes([0, shard]) + key.to_bytes(8, "big")


def events(upto: int) -> list[tuple[int, bytes, int, str | None]]:
    return [(s, ulid(s, t, k), k, st) for b in range(1, upto + 1) for s, t, k, st in BATCHES[b]]


def expected_source(upto: int) -> set[tuple[int, str]]:
    """The source table after the batches up to ``upto``: per key its newest event, in
    (ulid, shard) order, unless that is a delete."""
    newest: dict[int, tuple[int, bytes, int, str | None]] = {}
    for event in events(upto):
        held = newest.get(event[2])
        if held is None or (event[1], event[0]) > (held[1], held[0]):
            newest[event[2]] = event
    return {(k, st) for _, _, k, st in newest.values() if st is not None}


def expected_versions(upto: int) -> set[tuple[int, str, int, int | None]]:
    """History without delete versions: (key, status, valid_from, valid_to), one version
    per key and feed batch, a version before a delete ending at the delete."""
    per_batch: dict[tuple[int, int], tuple[bytes, int, str | None]] = {}
    for batch in range(1, upto + 1):
        for s, t, k, st in BATCHES[batch]:
            held = per_batch.get((k, batch))
            if held is None or (ulid(s, t, k), s) > (held[0], held[1]):
                per_batch[(k, batch)] = (ulid(s, t, k), s, st)
    out = set()
    for key in {k for k, _ in per_batch}:
        versions = sorted((v for (k, _), v in per_batch.items() if k == key), key=lambda v: v[:2])
        for i, (u, _, st) in enumerate(versions):
            start = int.from_bytes(u[:6], "big")
            end = int.from_bytes(versions[i + 1][0][:6], "big") if i + 1 < len(versions) else None
            if st is not None:
                out.add((key, st, start, end))
    return out


def land(spark: Any, batch: int) -> None:
    from changefeed.spark.feedtable import write_batch

    rows = [(s, ulid(s, t, k), k, None if st is None else (st,)) for s, t, k, st in BATCHES[batch]]
    frame = spark.createDataFrame(
        rows, "shard_id int, ulid binary, order_id bigint, payload struct<status:string>"
    )
    assert write_batch(spark, f"{SOURCE}.landed", frame) == batch


def write_model(project: Any, name: str, deletes: str = "remove", **overrides: str) -> None:
    """The model ``name`` into ``project``: docs/spark.md's example for current_delta with
    ``deletes='remove'``, else MODEL."""
    materialization, settings = MODELS.get(name, ("changefeed_current_state", ""))
    if name == "current_delta" and deletes == "remove":
        text = block("docs/spark.md", DOC_MODEL)
        assert "deletes='remove'" in text and "file_format='delta'" in text
        text = text.replace("source('landing', 'orders_feed')", FEED_REF).replace(
            "file_format='delta',", f"file_format='delta', schema='{SCHEMA}', buckets=4,"
        )
    else:
        text = MODEL.format(
            materialization=overrides.get("materialization", materialization),
            schema=overrides.get("schema", SCHEMA), settings=overrides.get("settings", settings),
            deletes=deletes, feed=FEED_REF,
        )  # fmt: skip
    (project / "models" / f"{name}.sql").write_text(text)


def project(catalog: str, root: Any) -> Any:
    path = package_project(root / f"project-{catalog}", f"changefeed_deletes_{catalog}", {})
    (path / "models").mkdir(exist_ok=True)
    if catalog == "parquet":
        for name in MODELS:
            write_model(path, name)
    else:
        iceberg = "file_format='iceberg'"
        write_model(path, "current_iceberg", schema=ICEBERG_SCHEMA, settings=iceberg)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


def current(spark: Any, model: str) -> list[tuple[int, str]]:
    query = f"select order_id, payload.status from spark_catalog.{SCHEMA}.{model}"
    return [(r[0], r[1]) for r in spark.sql(query).collect()]


def history(spark: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.sql(
        "select order_id, payload.status, unix_millis(valid_from), unix_millis(valid_to) "
        f"from spark_catalog.{SCHEMA}.history_delta").collect()]  # fmt: skip


@pytest.fixture(scope="module")
def rounds(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The models after each landed batch, and the harnesses for the tests that change them."""
    root = tmp_path_factory.mktemp("deletes")
    harnesses = fresh_projects(
        spark, SOURCE, {"parquet": SCHEMA, "iceberg": ICEBERG_SCHEMA}, root, project,
        ["parquet", "iceberg"],
    )  # fmt: skip
    seen: dict[str, Any] = {"harnesses": harnesses}
    for batch in BATCHES:
        land(spark, batch)
        run_all(spark, {"parquet": harnesses["parquet"]})
        seen[batch] = {name: current(spark, name) for name in MODELS if name.startswith("current")}
        seen[batch]["history"] = history(spark)
    return seen


@pytest.mark.parametrize("model", [m for m in MODELS if m.startswith("current")])
def test_current_state_without_tombstones_equals_the_source(
    rounds: dict[str, Any], model: str
) -> None:
    for batch in BATCHES:
        rows = rounds[batch][model]
        assert len(rows) == len(expected_source(batch)), f"batch {batch}: count(*)"
        assert set(rows) == expected_source(batch), f"batch {batch}"
    assert (2, "late") not in rounds[3][model], "an event older than the delete stayed hidden"
    assert (2, "again") in rounds[4][model], "a key written after its delete is back"


def test_history_without_delete_versions_closes_the_version_before_a_delete(
    rounds: dict[str, Any],
) -> None:
    for batch in BATCHES:
        rows = rounds[batch]["history"]
        assert len(rows) == len(set(rows)) and set(rows) == expected_versions(batch), batch
    gone = {r for r in rounds[4]["history"] if r[0] == 5}
    assert gone == set(), "a key inserted and deleted in one batch has no visible version"
    (before_delete,) = [r for r in rounds[4]["history"] if r[0] == 3]
    assert before_delete[3] == T0 + 30_000, "the version ends when the key was deleted"


def test_the_model_is_a_view_and_the_tombstones_stay_in_its_state(
    spark: Any, rounds: dict[str, Any]
) -> None:
    views = {r[1] for r in spark.sql(f"show views in spark_catalog.{SCHEMA}").collect()}
    assert set(MODELS) <= views
    deleted = spark.sql(
        f"select order_id from spark_catalog.{SCHEMA}.current_delta__changefeed_state "
        "where changefeed_deleted").collect()  # fmt: skip
    assert sorted(r[0] for r in deleted) == [3, 5, 6]
    columns = spark.table(f"spark_catalog.{SCHEMA}.current_delta").columns
    assert columns == ["shard_id", "ulid", "order_id", "payload", "changefeed_feed_batch"]
    assert "valid_to" in spark.table(f"spark_catalog.{SCHEMA}.history_delta").columns


def test_changing_deletes_needs_a_full_refresh(spark: Any, rounds: dict[str, Any]) -> None:
    harness = rounds["harnesses"]["parquet"]
    project_dir = harness.project_dir
    write_model(project_dir, "current_delta", deletes="tombstone")
    harness.reparse("spark")
    with pytest.raises(DbtError) as refused:
        harness.invoke(["run", "--select", "current_delta"], "spark")
    assert (
        "was built with deletes='remove' (a view over current_delta__changefeed_state) and is now"
        " configured to be a table; set deletes back or rebuild with dbt run --full-refresh"
    ) in str(refused.value)
    assert set(current(spark, "current_delta")) == expected_source(4), "the refused run wrote"

    harness.invoke(["run", "--select", "current_delta", "--full-refresh"], "spark")
    rows = spark.sql(
        f"select order_id, changefeed_deleted from spark_catalog.{SCHEMA}.current_delta"
    ).collect()
    assert sorted(r[0] for r in rows if r[1]) == [3, 5, 6], "tombstones are rows again"
    assert {r[0] for r in rows if not r[1]} == {k for k, _ in expected_source(4)}
    state = "current_delta__changefeed_state"
    listed = spark.sql(f"show tables in spark_catalog.{SCHEMA} like '{state}'")
    assert listed.count() == 0, "the full refresh dropped the old shape's state table"

    write_model(project_dir, "current_delta")
    harness.reparse("spark")
    harness.invoke(["run", "--select", "current_delta", "--full-refresh"], "spark")
    assert set(current(spark, "current_delta")) == expected_source(4)


def test_a_catalog_without_views_is_refused_before_any_statement(
    spark: Any, rounds: dict[str, Any]
) -> None:
    with current_catalog(spark, "iceberg"), pytest.raises(DbtError) as refused:
        rounds["harnesses"]["iceberg"].invoke(["run"], "spark")
    assert (
        "deletes='remove' makes the model a view of the rows that are not deleted, and its catalog"
        " 'iceberg' (Iceberg's Hadoop catalog) holds no views"
    ) in str(refused.value)
    with current_catalog(spark, "iceberg"):
        assert spark.sql(f"show tables in {ICEBERG_SCHEMA}").count() == 0, "nothing was created"


def test_reprocessing_a_range_rebuilds_the_state_behind_the_view(
    spark: Any, rounds: dict[str, Any]
) -> None:
    """changefeed_reprocess over every event (docs/spark.md, "Re-processing a range")
    rebuilds the hidden state, tombstones included: the models still equal the source."""
    harness = rounds["harnesses"]["parquet"]
    reprocess = '{changefeed_reprocess: {from: "2023-01-01"}}'
    models = ["current_parquet", "current_layers", "history_delta"]
    harness.invoke(["run", "--select", *models, "--vars", reprocess], "spark")
    for model in models[:2]:
        assert set(current(spark, model)) == expected_source(4), model
    assert set(history(spark)) == expected_versions(4)
    deleted = spark.sql(
        f"select order_id from spark_catalog.{SCHEMA}.current_layers__changefeed_state "
        "where changefeed_deleted").collect()  # fmt: skip
    assert sorted(r[0] for r in deleted) == [3, 5, 6], "the tombstones were rebuilt too"
