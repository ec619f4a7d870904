"""State models without tombstones: ``deletes='remove'`` (docs/spark.md "Deletes").

One scratch project on the shared Spark session consumes one landed feed into a current
state per shape (delta, parquet rewriting its buckets, parquet in layers) and a delta
history, all with ``deletes='remove'``. After each landed batch the models must equal an
independent model of the source: the keys whose newest event is not a delete, each with
that event's row. Batch 3 holds, from a shard that was behind, an event older than a
delete: the state's hidden tombstone must keep that key out of the model.

The feed carries the landing's operation column and the history models select it: each
version's operation (insert, update, delete, snapshot) must equal the independent model's,
also where a late version comes in before a key's first one and turns it into an update.
A snapshot's read that repeats the key's live version before it is no version (it waits in
the repeats table), until a late version comes in between (key 10); a read that a late
version makes a repeat leaves the model (key 11).
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
    1: [(0, 10, 1, "a"), (0, 11, 2, "a"), (1, 12, 3, "a"), (1, 13, 4, "a"), (0, 14, 10, "p"),
        (0, 16, 11, "p")],
    # key 2 deleted; key 5 inserted and deleted in the same batch
    2: [(0, 20, 1, "b"), (0, 21, 2, None), (1, 22, 5, "a"), (1, 23, 5, None), (1, 24, 6, "a")],
    # shard 2 was behind: key 2's event is older than its delete and must stay hidden
    3: [(2, 15, 2, "late"), (0, 30, 3, None), (1, 31, 4, "b")],
    # key 2 comes back (newer than its delete); key 4 changes again; key 8 is inserted...
    4: [(0, 40, 2, "again"), (1, 41, 6, None), (0, 45, 8, "x"), (0, 46, 1, "b"), (1, 47, 9, "s"),
        (0, 48, 10, "p"), (0, 49, 11, "q"), (1, 42, 4, "c")],
    # ...and shard 2, behind, brings key 8's older first version: the one above is an update
    # now; key 10 changed in between its read and the version before; key 11 did not
    5: [(2, 43, 8, "first"), (2, 44, 10, "q"), (2, 44, 11, "q")],
}  # fmt: skip
#: (batch, key) of the events a snapshot read (the landing's operation 'snapshot'): keys 1
#: and 10 read as they were (repeats), 9 read first, 11 read changed
SNAPSHOT_READS = {(4, 1), (4, 9), (4, 10), (4, 11)}

MODELS = {
    "current_delta": ("changefeed_current_state", "file_format='delta'"),
    "current_parquet": ("changefeed_current_state", "file_format='parquet'"),
    "current_layers": ("changefeed_current_state",
                       "file_format='parquet', parquet_layout='layers', max_layers=2"),
    "history_delta": ("changefeed_history", "file_format='delta'"),
    "history_parquet": ("changefeed_history", "file_format='parquet'"),
    # with tombstones: Iceberg's Hadoop catalog holds no views
    "history_iceberg": ("changefeed_history", "file_format='iceberg'"),
}  # fmt: skip
#: the current states, each selecting the operation (docs/spark.md's example with it added)
CURRENT_OPERATIONS = ("current_delta", "current_parquet", "current_layers")
#: the histories that select the operation, and where each keeps its state
HISTORIES = {
    "history_delta": f"spark_catalog.{SCHEMA}.history_delta__changefeed_state",
    "history_parquet": f"spark_catalog.{SCHEMA}.history_parquet__changefeed_state",
    "history_iceberg": "iceberg.cf_del_history.history_iceberg",
}
MODEL = """{{{{ config(materialized='{materialization}', unique_key='order_id', buckets=4,
    schema='{schema}', {settings}, deletes='{deletes}') }}}}
select e.shard_id, e.ulid, e.order_id, e.payload, e.changefeed_feed_batch{extra}
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


def all_versions(upto: int) -> dict[int, list[tuple[bytes, int, str | None, str]]]:
    """Per key its versions in (ulid, shard) order, one per feed batch (the batch's newest
    event): (ulid, shard, status, operation), the operation as a history tells it: a
    delete, a snapshot's read, an insert after no version or a delete, else an update; a
    snapshot's read with the status of the live version before it is 'repeat'."""
    per_batch: dict[tuple[int, int], tuple[bytes, int, str | None, bool]] = {}
    for batch in range(1, upto + 1):
        for s, t, k, st in BATCHES[batch]:
            held = per_batch.get((k, batch))
            if held is None or (ulid(s, t, k), s) > (held[0], held[1]):
                per_batch[(k, batch)] = (ulid(s, t, k), s, st, (batch, k) in SNAPSHOT_READS)
    out: dict[int, list[tuple[bytes, int, str | None, str]]] = {}
    for key in sorted({k for k, _ in per_batch}):
        versions = sorted((v for (k, _), v in per_batch.items() if k == key), key=lambda v: v[:2])
        before: str | None = None
        for u, s, st, read in versions:
            if st is None:
                operation = "delete"
            elif read and before is not None and before == st:
                operation = "repeat"
            elif read:
                operation = "snapshot"
            else:
                operation = "insert" if before is None else "update"
            out.setdefault(key, []).append((u, s, st, operation))
            before = st
    return out


def expected_versions(upto: int) -> set[tuple[int, str, int, int | None, str]]:
    """History without delete versions: (key, status, valid_from, valid_to, operation), a
    version before a delete ending at the delete."""
    out = set()
    for key, every in all_versions(upto).items():
        versions = [v for v in every if v[3] != "repeat"]
        for i, (u, _, st, operation) in enumerate(versions):
            start = int.from_bytes(u[:6], "big")
            end = int.from_bytes(versions[i + 1][0][:6], "big") if i + 1 < len(versions) else None
            if st is not None:
                out.add((key, st, start, end, operation))
    return out


def expected_operations(upto: int) -> set[tuple[int, int, str]]:
    """Every version, delete versions included: (key, valid_from, operation)."""
    return {(key, int.from_bytes(u[:6], "big"), operation)
            for key, versions in all_versions(upto).items()
            for u, _, _, operation in versions if operation != "repeat"}  # fmt: skip


def expected_repeats(upto: int) -> set[tuple[int, int]]:
    """The snapshot reads that are no version: (key, valid_from)."""
    return {(key, int.from_bytes(u[:6], "big"))
            for key, versions in all_versions(upto).items()
            for u, _, _, operation in versions if operation == "repeat"}  # fmt: skip


def land(spark: Any, batch: int) -> None:
    """One landed batch, with the operation column as a landing writes it."""
    from pyspark.sql import functions as F

    from changefeed.spark.feedtable import with_operation, write_batch

    rows = [(s, ulid(s, t, k), k, None if st is None else (st,), (batch, k) in SNAPSHOT_READS)
            for s, t, k, st in BATCHES[batch]]  # fmt: skip
    schema = "shard_id int, ulid binary, order_id bigint, payload struct<status:string>, r boolean"
    frame = with_operation(spark.createDataFrame(rows, schema), snapshot=False)
    frame = frame.withColumn(
        "changefeed_operation",
        F.when(F.col("r"), F.lit("snapshot")).otherwise(F.col("changefeed_operation")),
    ).drop("r")
    assert write_batch(spark, f"{SOURCE}.landed", frame) == batch


def write_model(project: Any, name: str, deletes: str = "remove", **overrides: str) -> None:
    """The model ``name`` into ``project``: docs/spark.md's example for current_delta with
    ``deletes='remove'``, else MODEL."""
    materialization, settings = MODELS.get(name, ("changefeed_current_state", ""))
    if name == "history_iceberg":
        overrides = {"schema": "iceberg.cf_del_history", **overrides}
        deletes = "tombstone"
    if name == "current_delta" and deletes == "remove":
        text = block("docs/spark.md", DOC_MODEL)
        assert "deletes='remove'" in text and "file_format='delta'" in text
        text = text.replace("source('landing', 'orders_feed')", FEED_REF).replace(
            "file_format='delta',", f"file_format='delta', schema='{SCHEMA}', buckets=4,"
        )
        batch = "e.changefeed_feed_batch\n"
        assert text.count(batch) == 1
        text = text.replace(batch, "e.changefeed_feed_batch, e.changefeed_operation\n")
    else:
        text = MODEL.format(
            materialization=overrides.get("materialization", materialization),
            schema=overrides.get("schema", SCHEMA), settings=overrides.get("settings", settings),
            deletes=deletes, feed=FEED_REF,
            extra=", e.changefeed_operation",
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


def current_operations(spark: Any, model: str) -> set[tuple[int, str]]:
    query = f"select order_id, changefeed_operation from spark_catalog.{SCHEMA}.{model}"
    return {(r[0], r[1]) for r in spark.sql(query).collect()}


def expected_current_operations(upto: int) -> set[tuple[int, str]]:
    """Per live key, its row's operation as the runs (one per batch) applied it: a delete,
    a snapshot's read, else an insert after no row or a deleted one and an update after a
    live one; a late event older than the row changes neither."""
    held: dict[int, tuple[bytes, int, bool, str]] = {}
    for batch in range(1, upto + 1):
        newest: dict[int, tuple[bytes, int, str | None]] = {}
        for s, t, k, st in BATCHES[batch]:
            if k not in newest or (ulid(s, t, k), s) > newest[k][:2]:
                newest[k] = (ulid(s, t, k), s, st)
        for key, (u, s, st) in newest.items():
            row = held.get(key)
            if row is not None and row[:2] >= (u, s):
                continue
            if st is None:
                operation = "delete"
            elif (batch, key) in SNAPSHOT_READS:
                operation = "snapshot"
            else:
                operation = "insert" if row is None or row[2] else "update"
            held[key] = (u, s, st is None, operation)
    return {(key, row[3]) for key, row in held.items() if not row[2]}


def rebuilt_current_operations(upto: int) -> set[tuple[int, str]]:
    """The same rebuilt from every event at once (re-processing): each live key's newest
    version's operation, as a history gives it (a repeated read: a snapshot's)."""
    live = {key for key, _ in expected_source(upto)}
    return {(key, versions[-1][3].replace("repeat", "snapshot"))
            for key, versions in all_versions(upto).items() if key in live}  # fmt: skip


def history(spark: Any, model: str = "history_delta") -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.sql(
        "select order_id, payload.status, unix_millis(valid_from), unix_millis(valid_to), "
        f"changefeed_operation from spark_catalog.{SCHEMA}.{model}").collect()]  # fmt: skip


def operations(spark: Any, model: str) -> list[tuple[Any, ...]]:
    """Every version of the model's state, delete versions included."""
    return [tuple(r) for r in spark.sql(
        "select order_id, unix_millis(valid_from), changefeed_operation "
        f"from {HISTORIES[model]}").collect()]  # fmt: skip


def repeats(spark: Any, model: str) -> list[tuple[Any, ...]]:
    """The repeated snapshot reads the model's state keeps aside (none before the first)."""
    table = f"{HISTORIES[model]}__changefeed_repeats"
    if not spark.catalog.tableExists(table):
        return []
    return [tuple(r) for r in spark.sql(
        f"select order_id, unix_millis(valid_from), changefeed_operation, valid_to "
        f"from {table}").collect()]  # fmt: skip


CURSOR_CUT = r"\binsert (into|overwrite table) \S+__changefeed_cursor "
#: a history run cut after its first write (R1: the state's write fails) and after its
#: second (R2: the repeats table's second write fails), as (pattern, writes let through)
STATE = r"\S+(?:__changefeed_state|history_iceberg)"
CUTS = {
    "cut after R1": (rf"\b(insert overwrite table {STATE}__changefeed_next "
                     rf"|merge into {STATE} )", 0),
    "cut after R2": (r"\b(insert overwrite table \S+__changefeed_repeats__changefeed_next "
                     r"|merge into \S+__changefeed_repeats )", 1),
}  # fmt: skip


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
        if batch == 4:
            # the models written and their cursors not: the re-run reads the window again
            run_all(spark, {"parquet": harnesses["parquet"]}, "--select", *CURRENT_OPERATIONS,
                    fail_at=CURSOR_CUT)  # fmt: skip
        if batch == max(BATCHES):
            # the histories' run whose late versions move reads both ways, cut before its
            # second and its third write (R2, R3) and run again (protocol 11.8); the
            # current states take the batch in the run after (their runs cut mid-write:
            # tests/test_spark_scd.py, tests/test_spark_scd_kill.py)
            for cut, (pattern, passed) in CUTS.items():
                parquet = {"parquet": harnesses["parquet"]}
                run_all(spark, parquet, "--select", *HISTORIES, fail_at=pattern,
                        let_through=passed)  # fmt: skip
                seen[cut] = {model: (operations(spark, model), repeats(spark, model))
                             for model in HISTORIES}  # fmt: skip
        run_all(spark, {"parquet": harnesses["parquet"]})
        seen[batch] = {name: current(spark, name) for name in MODELS if name.startswith("current")}
        for model in CURRENT_OPERATIONS:
            seen[batch][f"{model}_operations"] = current_operations(spark, model)
        seen[batch]["history"] = history(spark)
        seen[batch]["history_parquet"] = history(spark, "history_parquet")
        for model in HISTORIES:
            seen[batch][f"{model}_operations"] = operations(spark, model)
            seen[batch][f"{model}_repeats"] = repeats(spark, model)
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
        for model in ("history", "history_parquet"):
            rows = rounds[batch][model]
            assert len(rows) == len(set(rows)) and set(rows) == expected_versions(batch), batch
    gone = {r for r in rounds[4]["history"] if r[0] == 5}
    assert gone == set(), "a key inserted and deleted in one batch has no visible version"
    (before_delete,) = [r for r in rounds[4]["history"] if r[0] == 3]
    assert before_delete[3] == T0 + 30_000, "the version ends when the key was deleted"


@pytest.mark.parametrize("model", CURRENT_OPERATIONS)
def test_a_current_state_row_has_its_newest_versions_operation(
    rounds: dict[str, Any], model: str
) -> None:
    """Merge (Delta), rewrite and layers (parquet): after every batch (batch 4 read twice,
    its cursor cut the first time), each live key's operation is the one its run gave it:
    key 4's an update of the state's row from batch 3 (also when read again), key 8's
    still an insert after its older version lands (a late event changes nothing of the
    row)."""
    for batch in BATCHES:
        assert rounds[batch][f"{model}_operations"] == expected_current_operations(batch), batch
    assert (4, "update") in rounds[4][f"{model}_operations"]
    assert (8, "insert") in rounds[5][f"{model}_operations"]
    assert rebuilt_current_operations(5) - expected_current_operations(5) == {(8, "update")}


@pytest.mark.parametrize("model", HISTORIES)
def test_each_version_has_its_operation(rounds: dict[str, Any], model: str) -> None:
    """insert, update, delete and snapshot against an independent model of the versions,
    after every batch: key 2's late event is an update between its insert and its delete,
    and key 8's insert becomes an update when its older first version lands after it."""
    for batch in BATCHES:
        rows = rounds[batch][f"{model}_operations"]
        assert len(rows) == len(set(rows)) and set(rows) == expected_operations(batch), batch
    assert (8, T0 + 45_000, "insert") in rounds[4][f"{model}_operations"]
    assert (8, T0 + 45_000, "update") in rounds[5][f"{model}_operations"]
    seen = {r[2] for r in rounds[5][f"{model}_operations"]}
    assert seen == {"insert", "update", "delete", "snapshot"}


@pytest.mark.parametrize("model", HISTORIES)
def test_a_snapshot_read_that_repeats_the_version_before_it_is_no_version(
    rounds: dict[str, Any], model: str
) -> None:
    """Key 1's read repeats its live version: one version, still open; key 10's read
    becomes a version when a change lands between it and the version before; key 11's
    read leaves the model when a late version with its values lands before it."""
    for batch in BATCHES:
        held = rounds[batch][f"{model}_repeats"]
        assert len(held) == len(set(held)), batch
        assert {(k, t) for k, t, _, _ in held} == expected_repeats(batch), batch
        assert all(o == "snapshot" and end is None for _, _, o, end in held), held
    assert expected_repeats(4) == {(1, T0 + 46_000), (10, T0 + 48_000)}
    # cut after R1 or R2 and run again: each version in the state or the repeats table
    both = expected_repeats(4) | expected_repeats(5)
    for cut, state in (("cut after R1", expected_operations(4)),
                       ("cut after R2", expected_operations(5))):  # fmt: skip
        held, aside = rounds[cut][model]
        assert set(held) == state, cut
        assert {(k, t) for k, t, _, _ in aside} == both, cut
    assert expected_repeats(5) == {(1, T0 + 46_000), (11, T0 + 49_000)}
    (key_1,) = [r for r in rounds[5][f"{model}_operations"] if r[0] == 1 and r[1] > T0 + 10_000]
    assert key_1 == (1, T0 + 20_000, "update"), "the version before the read is the last"


def test_the_model_is_a_view_and_the_tombstones_stay_in_its_state(
    spark: Any, rounds: dict[str, Any]
) -> None:
    views = {r[1] for r in spark.sql(f"show views in spark_catalog.{SCHEMA}").collect()}
    assert set(MODELS) - {"history_iceberg"} <= views
    deleted = spark.sql(
        f"select order_id from spark_catalog.{SCHEMA}.current_delta__changefeed_state "
        "where changefeed_deleted").collect()  # fmt: skip
    assert sorted(r[0] for r in deleted) == [3, 5, 6]
    columns = spark.table(f"spark_catalog.{SCHEMA}.current_delta").columns
    assert columns == ["shard_id", "ulid", "order_id", "payload", "changefeed_feed_batch",
                       "changefeed_operation"]  # fmt: skip
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
    last = max(BATCHES)
    assert set(current(spark, "current_delta")) == expected_source(last), "the refused run wrote"

    harness.invoke(["run", "--select", "current_delta", "--full-refresh"], "spark")
    rows = spark.sql(
        f"select order_id, changefeed_deleted from spark_catalog.{SCHEMA}.current_delta"
    ).collect()
    assert sorted(r[0] for r in rows if r[1]) == [3, 5, 6], "tombstones are rows again"
    assert {r[0] for r in rows if not r[1]} == {k for k, _ in expected_source(max(BATCHES))}
    state = "current_delta__changefeed_state"
    listed = spark.sql(f"show tables in spark_catalog.{SCHEMA} like '{state}'")
    assert listed.count() == 0, "the full refresh dropped the old shape's state table"

    write_model(project_dir, "current_delta")
    harness.reparse("spark")
    harness.invoke(["run", "--select", "current_delta", "--full-refresh"], "spark")
    assert set(current(spark, "current_delta")) == expected_source(max(BATCHES))


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
    models = ["current_parquet", "current_layers", *HISTORIES]
    harness.invoke(["run", "--select", *models, "--vars", reprocess], "spark")
    last = max(BATCHES)
    for model in models[:2]:
        assert set(current(spark, model)) == expected_source(last), model
        # rebuilt from every event: key 8's insert is an update of its older version now
        assert current_operations(spark, model) == rebuilt_current_operations(last), model
    assert set(history(spark)) == expected_versions(last)
    for model in HISTORIES:
        assert set(operations(spark, model)) == expected_operations(last), model
        held = repeats(spark, model)
        assert {(k, t) for k, t, _, _ in held} == expected_repeats(last) and len(held) == 2, model
    deleted = spark.sql(
        f"select order_id from spark_catalog.{SCHEMA}.current_layers__changefeed_state "
        "where changefeed_deleted").collect()  # fmt: skip
    assert sorted(r[0] for r in deleted) == [3, 5, 6], "the tombstones were rebuilt too"
