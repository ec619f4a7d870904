"""State consumers of Spark feeds, run for real on parquet, Delta and Iceberg: the current
state (``changefeed_current_state``, SCD type 1) and the history (``changefeed_history``,
SCD type 2) of a landed feed (docs/spark.md "Current state and history"; protocol 11.8).

One scratch dbt project per format, all on the shared Spark session, consume one landed
feed in three rounds. Round 2 fails after its state write and before its cursor commit
(the state is ahead of the cursor), round 3 fails before its state write and then, on
parquet, between two buckets' partition switches; each is re-run.
After every step the tables must equal what an independent Python model of the rules
gives, column for column (ULIDs, feed batches, valid_from/valid_to): an interrupted run
followed by a re-run gives the same output as an uninterrupted run. The events include
two events of one key in one batch, deletes, an event older than the state's (on a shard
that was behind) and a late event older than a delete.

The failures are raised by Spark's ``sql`` when dbt sends the matching statement, as in
tests/support/spark_kill_scenario.py, which kills the process at such a point instead.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError, DbtHarness, package_project
from tests.support.dbt_spark import (
    SCHEMA_MACRO,
    current_catalog,
    fresh_projects,
    recording,
    run_all,
)
from tests.support.doc_blocks import block

#: the scenario (15 dbt runs in two projects) runs in the first test's setup: about 16
#: minutes at a load average of 10-14 on 2 cores, above the suite's 600 s default
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500)]

SOURCE = "cf_scd_src"
FEED = f"{SOURCE}.landed"
FORMATS = ("parquet", "delta", "iceberg")
#: one dbt project per current catalog (tests/test_spark_lakehouse.py): Spark's own, Iceberg's
PROJECTS = {"parquet": ("parquet", "delta"), "iceberg": ("iceberg",)}
T0 = 1_700_000_000_000

#: (shard, time in seconds after T0, order_id, status; None: the key is gone) per batch.
BATCHES: dict[int, list[tuple[int, int, int, str | None]]] = {
    1: [(0, 10, 1, "a"), (0, 11, 2, "a"), (1, 12, 3, "a"), (1, 13, 4, "a")],
    # two events of key 1 in one batch; key 2 deleted
    2: [(0, 20, 1, "b"), (0, 21, 1, "c"), (0, 22, 2, None), (1, 23, 3, "b")],
    # shard 2 was behind: its events are older than the state's for keys 1 and 2
    3: [(2, 15, 1, "old"), (2, 21, 2, "late"), (0, 30, 5, "a"), (1, 31, 4, None)],
}

FEED_REF = "api.Relation.create(schema='spark_catalog." + SOURCE + "', identifier='landed')"
#: docs/spark.md's two models (by the digest of their text, tests/test_docs_samples.py OTHERS)
DOC_MODELS = {"current": "dfee432117a3", "history": "a84aa2979dd1"}
#: the (format, model) pairs whose MERGEs never name the run's keys (key_filter_limit=0),
#: so that both forms of each MERGE run on each format; the others keep the default
UNFILTERED = {("iceberg", "current"), ("delta", "history")}
#: a published feed's way: no payload column, a delete condition
STATUS_MODEL = """{{ config(materialized='changefeed_current_state', file_format='parquet',
    unique_key='order_id', delete_when="status = 'gone'") }}
select e.shard_id, e.ulid, e.order_id, coalesce(e.payload.status, 'gone') as status,
    e.changefeed_feed_batch
from {{ changefeed.feed_events(source('landing', 'orders_feed'), this) }} as e
"""


#: a parquet state's second partition switch (macros/spark/_spark_scd_switch.sql), and a
#: layered state's drop of its older layers after a compaction, once its view points at
#: the compacted layer, which follows the view's move to it (macros/spark/_spark_scd_layers.sql);
#: the first group that matches names the model
SECOND_SWITCH = (
    r"\balter table (?:(\S+) partition \(changefeed_bucket = \d+\) set location "
    r"|(\S+?)__changefeed_layers drop if exists partition \(changefeed_layer )"
    r"|\bcreate or replace view (\S+) as\b"
)
#: the layers layout's model (parquet only): compacts in round 3, when it would hold a 4th layer
LAYERED = "current_layers"
LAYERED_SETTINGS = "parquet_layout='layers', max_layers=3"

EVENT = "e.shard_id, e.ulid, e.order_id, e.changefeed_feed_batch"
#: model -> (its config, its select list, the error it must fail with)
BAD_MODELS = {
    "bad_format": ("unique_key='order_id', file_format='orc'", EVENT,
                   "file_format 'orc' is not supported; accepted values: parquet, delta, iceberg"),
    "bad_key": ("file_format='parquet'", EVENT, "unique_key must name the key column(s)"),
    "bad_event_key": ("unique_key=['ulid']", EVENT, "remove 'ulid' from unique_key"),
    "bad_buckets": ("unique_key='order_id', buckets=0", EVENT,
                    "buckets must be a whole number from 1 to 65536 (got 0)"),
    "bad_partition": ("unique_key='order_id', partition_by=['order_id']", EVENT,
                      "partition_by is not a setting of this materialization"),
    "bad_columns": ("unique_key='order_id'", "e.shard_id, e.order_id, e.changefeed_feed_batch",
                    "the select has no column ulid"),
    "bad_reserved": ("unique_key='order_id'", EVENT + ", true as changefeed_deleted",
                     "may not return a column named changefeed_deleted"),
    "bad_key_filter": ("unique_key='order_id', file_format='delta', key_filter_limit=-1", EVENT,
                       "key_filter_limit must be a whole number from 0 to 1000000"),
    "bad_key_filter_type": ("unique_key='order_id', file_format='iceberg', key_filter_limit='all'",
                            EVENT, "key_filter_limit must be a whole number from 0 to 1000000"),
    "parquet_key_filter": ("unique_key='order_id', key_filter_limit=10", EVENT,
                           "key_filter_limit is a setting of delta and iceberg states"),
    "bad_layout": ("unique_key='order_id', parquet_layout='merge'", EVENT,
                   "parquet_layout must be one of rewrite, layers (got merge)"),
    "delta_layout": ("unique_key='order_id', file_format='delta', parquet_layout='layers'", EVENT,
                     "parquet_layout is a setting of parquet states"),
    "bad_max_layers": ("unique_key='order_id', parquet_layout='layers', max_layers=1", EVENT,
                       "max_layers must be a whole number from 2 to 1000"),
    "stray_max_layers": ("unique_key='order_id', max_layers=4", EVENT,
                         "max_layers is a setting of parquet_layout='layers'"),
    "bad_deletes": ("unique_key='order_id', deletes='purge'", EVENT,
                    "deletes must be one of tombstone, remove (got purge)"),
    # the layered state of the scenario, configured without the layout
    "layout_switch": (f"unique_key='order_id', alias='{LAYERED}', buckets=4", EVENT,
                      "was built with parquet_layout='layers' (a view over its layers) and is"
                      " now configured to be a table"),
}  # fmt: skip


def ulid(shard: int, t: int, key: int) -> bytes:
    return (T0 + t * 1000).to_bytes(6, "big") + bytes([0, shard]) + key.to_bytes(8, "big")


def schema_of(fmt: str) -> str:
    return f"cf_scd_{fmt}"


# -- the rules, in Python ------------------------------------------------------------------


def events(upto: int) -> list[tuple[int, bytes, int, str | None, int]]:
    """(shard, ulid, key, status, feed batch) of batches 1..upto."""
    return [(s, ulid(s, t, k), k, st, b) for b in range(1, upto + 1) for s, t, k, st in BATCHES[b]]


def expected_current(upto: int) -> set[tuple[Any, ...]]:
    newest: dict[int, tuple[int, bytes, int, str | None, int]] = {}
    for e in events(upto):
        if e[2] not in newest or (e[1], e[0]) > (newest[e[2]][1], newest[e[2]][0]):
            newest[e[2]] = e
    return {(s, u.hex(), k, st, b, st is None) for s, u, k, st, b in newest.values()}


def expected_history(upto: int) -> set[tuple[Any, ...]]:
    per_batch: dict[tuple[int, int], tuple[int, bytes, int, str | None, int]] = {}
    for e in events(upto):
        grain = (e[2], e[4])
        if grain not in per_batch or (e[1], e[0]) > (per_batch[grain][1], per_batch[grain][0]):
            per_batch[grain] = e
    out = set()
    for key in {k for k, _ in per_batch}:
        versions = sorted(
            (v for (k, _), v in per_batch.items() if k == key), key=lambda v: (v[1], v[0])
        )
        for i, (s, u, k, st, b) in enumerate(versions):
            start = int.from_bytes(u[:6], "big")
            end = int.from_bytes(versions[i + 1][1][:6], "big") if i + 1 < len(versions) else None
            out.add((s, u.hex(), k, st, b, st is None, start, end))
    return out


# -- running -------------------------------------------------------------------------------


def land(spark: Any, batch: int) -> None:
    from changefeed.spark.feedtable import write_batch

    rows = [(s, ulid(s, t, k), k, None if st is None else (st,)) for s, t, k, st in BATCHES[batch]]
    frame = spark.createDataFrame(
        rows, "shard_id int, ulid binary, order_id bigint, payload struct<status:string>"
    )
    assert write_batch(spark, FEED, frame) == batch


def project(catalog: str, root: Any, buckets: int = 4, bad: bool = False) -> Any:
    """The docs' models for each format of ``catalog`` (PROJECTS), each in its format's
    schema, over the test's feed; ``bad``: and BAD_MODELS."""
    models = {}
    for fmt in PROJECTS[catalog]:
        texts = {name: block("docs/spark.md", digest) for name, digest in DOC_MODELS.items()}
        if fmt == "parquet":
            texts["current_status"] = STATUS_MODEL
            if not bad:  # BAD_MODELS' layout_switch takes its name
                texts[LAYERED] = texts["current"]
        for name, text in texts.items():
            assert "file_format=" in text and "source('landing', 'orders_feed')" in text
            settings = f"schema='{schema_of(fmt)}', alias='{name}', buckets={buckets}"
            if (fmt, name) in UNFILTERED:
                settings += ", key_filter_limit=0"
            if name == LAYERED:
                settings += ", " + LAYERED_SETTINGS
            text = re.sub(r"file_format='\w+'", f"file_format='{fmt}', {settings}", text)
            models[f"{name}_{fmt}.sql"] = text.replace("source('landing', 'orders_feed')", FEED_REF)
    if bad:
        for name, (config, select, _) in BAD_MODELS.items():
            models[f"{name}.sql"] = (
                "{{ config(materialized='changefeed_current_state', "
                f"schema='{schema_of(catalog)}', {config}) }}}}\nselect {select} from "
                f"{{{{ changefeed.feed_events({FEED_REF}, this) }}}} as e\n"
            )
    path = package_project(root / f"project-{catalog}", f"changefeed_scd_{catalog}", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


def tables(spark: Any, fmt: str) -> dict[str, Any]:
    schema = schema_of(fmt)
    with current_catalog(spark, fmt):
        event = "shard_id, lower(hex(ulid)), order_id"
        out = {
            "current": {tuple(r) for r in spark.sql(
                f"select {event}, payload.status, changefeed_feed_batch, changefeed_deleted "
                f"from {schema}.current").collect()},
            "history": {tuple(r) for r in spark.sql(
                f"select {event}, payload.status, changefeed_feed_batch, changefeed_deleted, "
                f"unix_millis(valid_from), unix_millis(valid_to) from {schema}.history").collect()},
            "cursors": [tuple(r) for r in spark.sql(
                "select changefeed_batch, changefeed_feed_batch "
                f"from {schema}.current__changefeed_cursor order by 1").collect()],
            "rows": spark.sql(f"select count(*) from {schema}.current").collect()[0][0],
        }  # fmt: skip
        if fmt == "parquet":
            status = spark.sql(
                f"select {event}, case when changefeed_deleted then null else status end, "
                f"changefeed_feed_batch, changefeed_deleted from {schema}.current_status"
            ).collect()
            out["current_status"] = {tuple(r) for r in status}
            out[LAYERED] = {tuple(r) for r in spark.sql(
                f"select {event}, payload.status, changefeed_feed_batch, changefeed_deleted "
                f"from {schema}.{LAYERED}").collect()}
            count = spark.sql(f"select count(*) from {schema}.{LAYERED}").first()
            out[LAYERED + " rows"] = count[0]
            out[LAYERED + " layers"] = sorted(int(r[0].partition("=")[2]) for r in spark.sql(
                f"show partitions {schema}.{LAYERED}__changefeed_layers").collect())
            out[LAYERED + " cursors"] = [tuple(r) for r in spark.sql(
                "select changefeed_batch, changefeed_feed_batch "
                f"from {schema}.{LAYERED}__changefeed_cursor order by 1").collect()]
    return out


def merge_writes(spark: Any, fmt: str, model: str) -> dict[str, Any]:
    """How a lakehouse state's merges wrote: its table properties and, per MERGE, the
    rows it copied (Delta) or the position deletes it added (Iceberg)."""
    table = f"{schema_of(fmt)}.`{model}`"  # quoted: DESCRIBE HISTORY history is ambiguous
    with current_catalog(spark, fmt):
        props = {r[0]: r[1] for r in spark.sql(f"show tblproperties {table}").collect()}
        if fmt == "delta":
            history = spark.sql(f"describe history {table}").collect()
            merges = [dict(r.operationMetrics) for r in history if r.operation == "MERGE"]
        else:
            snapshots = spark.sql(f"select operation, summary from {table}.snapshots").collect()
            merges = [dict(r.summary) for r in snapshots if r.operation == "overwrite"]
    return {"properties": props, "merges": merges}


@pytest.fixture(scope="module")
def scenario(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every format through the rounds; the tables after each step."""
    root = tmp_path_factory.mktemp("scd")
    schemas = {fmt: schema_of(fmt) for fmt in FORMATS}
    harnesses = fresh_projects(spark, SOURCE, schemas, root, project, PROJECTS)
    seen: dict[str, Any] = {}

    def snap(step: str) -> None:
        seen[step] = {fmt: tables(spark, fmt) for fmt in FORMATS}

    land(spark, 1)
    run_all(spark, harnesses)
    snap("1")
    land(spark, 2)
    # the state is written, the cursor is not
    run_all(spark, harnesses, fail_at=r"\binsert (into|overwrite table) \S+__changefeed_cursor ")
    snap("2 interrupted")
    run_all(spark, harnesses)
    snap("2")
    run_all(spark, harnesses)
    snap("2 again")
    land(spark, 3)
    # nothing of the run is written
    run_all(
        spark,
        harnesses,
        fail_at=r"\b(insert overwrite table \S+__changefeed_next |merge into )",
    )
    snap("3 interrupted")
    # parquet: between two buckets' partition switches (each bucket's old directory must
    # still be there, so every key has its old row or its new one)
    # (the Delta models of the parquet project apply round 3 here: their merges are recorded)
    with recording(r"\bmerge into ") as merges:
        run_all(spark, {"parquet": harnesses["parquet"]}, fail_at=SECOND_SWITCH, let_through=1)
        snap("3 half switched")
        run_all(spark, harnesses)
    seen["merge statements"] = merges
    snap("3")
    seen["merges"] = {
        (fmt, model): merge_writes(spark, fmt, model)
        for fmt in ("delta", "iceberg")
        for model in ("current", "history")
    }
    run_all(spark, harnesses, "--full-refresh")
    snap("full refresh")
    seen["root"] = root
    return seen


@pytest.mark.parametrize("fmt", FORMATS)
def test_current_state_keeps_the_newest_event_per_key(scenario: dict[str, Any], fmt: str) -> None:
    for step, upto in (("1", 1), ("2 interrupted", 2), ("2", 2), ("2 again", 2), ("3", 3),
                       ("full refresh", 3)):  # fmt: skip
        assert scenario[step][fmt]["current"] == expected_current(upto), step
        assert scenario[step][fmt]["rows"] == len(expected_current(upto)), (
            f"{step}: one row per key"
        )
    final = {r[2]: r for r in scenario["3"][fmt]["current"]}
    assert final[1][3] == "c", "the older event of shard 2 did not overwrite"
    assert final[2][5] and final[4][5], "deletes are tombstones"
    assert final[2][3] is None, "a late event older than the delete did not bring the key back"


@pytest.mark.parametrize("fmt", FORMATS)
def test_history_has_one_version_per_key_and_feed_batch(scenario: dict[str, Any], fmt: str) -> None:
    for step, upto in (("1", 1), ("2 interrupted", 2), ("2", 2), ("2 again", 2), ("3", 3),
                       ("full refresh", 3)):  # fmt: skip
        assert scenario[step][fmt]["history"] == expected_history(upto), step
    versions = sorted(r for r in scenario["3"][fmt]["history"] if r[2] == 2)
    in_time = [(r[3], r[5]) for r in sorted(versions, key=lambda r: r[6])]
    assert in_time == [("a", False), ("late", False), (None, True)], "late event before the delete"


@pytest.mark.parametrize("fmt", FORMATS)
def test_interrupted_runs_and_reruns_commit_the_cursor_once(
    scenario: dict[str, Any], fmt: str
) -> None:
    assert scenario["1"][fmt]["cursors"] == [(1, 1)]
    assert scenario["2 interrupted"][fmt]["cursors"] == [(1, 1)], "the cursor lags behind the state"
    assert scenario["2"][fmt]["cursors"] == [(1, 1), (2, 2)]
    assert scenario["2 again"][fmt] == scenario["2"][fmt], "nothing new changes nothing"
    assert scenario["3 interrupted"][fmt] == scenario["2"][fmt], "a run that fails writes nothing"
    assert scenario["3"][fmt]["cursors"] == [(1, 1), (2, 2), (3, 3)]
    assert scenario["full refresh"][fmt]["cursors"] == [(1, 3)]


def test_a_parquet_apply_cut_between_bucket_switches_loses_no_row(
    scenario: dict[str, Any],
) -> None:
    """Each bucket is switched to its new directory by one metastore call, and old
    directories are deleted only after the last switch: cut in between, every key has its
    round-2 row or its round-3 row (S3), and the re-run gives the uninterrupted state."""
    half = scenario["3 half switched"]["parquet"]
    for name, expected in (("current", expected_current), ("history", expected_history)):
        before, after = expected(2), expected(3)
        assert half[name] <= before | after, name
        held = {row[2] for row in half[name]}
        assert {row[2] for row in before} <= held, f"{name}: a key lost its rows"
        assert held <= {row[2] for row in after}, name
        if name == "current":
            assert len(half[name]) == len(held), "one row per key"
    assert half["cursors"] == scenario["2"]["parquet"]["cursors"]
    assert scenario["3"]["parquet"]["current"] == expected_current(3)


def test_a_layered_parquet_state_adds_layers_and_compacts(scenario: dict[str, Any]) -> None:
    """parquet_layout='layers' (docs/spark.md "Cost"; protocol 11.8, L1-L3): each run adds
    its window as one layer and the model is a view that resolves the layers; with
    max_layers=3 the run that would add a 4th writes the whole state as one layer and
    drops the older ones. Cut after its view points at that layer and before the drop, the
    view already gives round 3's state (the older layers lose to it); the re-run, whose
    cursor had not moved, compacts again. Every step equals the rewrite layout's rules."""
    steps = {  # step -> (batches applied, layers, cursor rows)
        "1": (1, [1], [(1, 1)]),
        "2 interrupted": (2, [1, 2], [(1, 1)]),
        "2": (2, [1, 2, 3], [(1, 1), (2, 2)]),
        "2 again": (2, [1, 2, 3], [(1, 1), (2, 2)]),
        "3 interrupted": (2, [1, 2, 3], [(1, 1), (2, 2)]),
        "3 half switched": (3, [1, 2, 3, 4], [(1, 1), (2, 2)]),
        "3": (3, [5], [(1, 1), (2, 2), (3, 3)]),
        "full refresh": (3, [1], [(1, 3)]),
    }
    for step, (upto, layers, cursors) in steps.items():
        seen = scenario[step]["parquet"]
        assert seen[LAYERED] == expected_current(upto), step
        assert seen[LAYERED + " rows"] == len(expected_current(upto)), f"{step}: one row per key"
        assert seen[LAYERED + " layers"] == layers, step
        assert seen[LAYERED + " cursors"] == cursors, step


def test_a_delete_condition_for_feeds_without_payload(scenario: dict[str, Any]) -> None:
    want = {(s, u, k, st, b, d) for s, u, k, st, b, d in expected_current(3)}
    assert scenario["3"]["parquet"]["current_status"] == want


def test_configs_are_checked_before_any_statement(scenario: dict[str, Any], spark: Any) -> None:
    """Bad configs and selects fail naming the fix; a changed bucket count fails before it
    touches the state (a key would be in two buckets)."""
    before = tables(spark, "parquet")
    root = scenario["root"] / "checks"
    harness = DbtHarness(root / "dbt", spark=lambda: spark,
                         project_dir=project("parquet", root, buckets=8, bad=True))  # fmt: skip
    with pytest.raises(DbtError) as failed:
        harness.invoke(["run", "--select", "current_parquet", *BAD_MODELS], "spark")
    for name, (_, _, message) in BAD_MODELS.items():
        assert message in str(failed.value), name
    assert "was built with buckets=4 and is now configured with buckets=8" in str(failed.value)
    assert tables(spark, "parquet") == before


@pytest.mark.parametrize("model", ["current", "history"])
def test_lakehouse_states_merge_with_row_level_deletes(
    scenario: dict[str, Any], model: str
) -> None:
    """docs/spark.md "Cost": Delta and Iceberg states mark a changed key's old row (or a
    version's old valid_to) deleted instead of rewriting its data file."""
    delta, iceberg = scenario["merges"]["delta", model], scenario["merges"]["iceberg", model]
    assert delta["properties"].get("delta.enableDeletionVectors") == "true"
    for mode in ("write.merge.mode", "write.update.mode", "write.delete.mode"):
        assert iceberg["properties"].get(mode) == "merge-on-read", mode
    assert iceberg["properties"].get("format-version") == "2"
    # Rounds 2 and 3 changed held keys; with copy-on-write they would copy the other
    # rows of the files they touched.
    assert len(delta["merges"]) >= 2 and len(iceberg["merges"]) >= 2, (delta, iceberg)
    assert all(m["numTargetRowsCopied"] == "0" for m in delta["merges"]), delta["merges"]
    assert sum(int(m["numTargetDeletionVectorsAdded"]) for m in delta["merges"]) > 0
    copied = "spark.merge-into.num-target-rows-copied"
    assert all(m.get(copied, "0") == "0" for m in iceberg["merges"]), iceberg["merges"]
    assert sum(int(m.get("added-position-deletes", 0)) for m in iceberg["merges"]) > 0


def test_lakehouse_merges_filter_the_state_by_the_runs_key_hashes(
    scenario: dict[str, Any], spark: Any
) -> None:
    """docs/spark.md "Cost": a MERGE names the xxhash64 of each key of its window, so that
    Spark drops the state's other rows at the scan instead of shuffling the whole state
    into the MERGE's join; with key_filter_limit=0 (UNFILTERED) it names only the touched
    buckets. The results above, the same for both forms, are those of the rules."""
    statements = scenario["merge statements"]
    assert len(statements) == 4, "current and history, on Delta and Iceberg"
    batch_3 = {r[0] for r in spark.sql(
        f"select cast(xxhash64(order_id) as string) from spark_catalog.{FEED} "
        "where changefeed_batch = 3").collect()}  # fmt: skip
    assert len(batch_3) == 4
    forms = set()
    for statement in statements:
        target = re.search(r"\bmerge into (\S+)", statement)
        assert target, statement
        (fmt,) = [f for f in ("delta", "iceberg") if schema_of(f) in target.group(1)]
        (model,) = [m for m in ("current", "history") if re.search(rf"\b{m}\b", target.group(1))]
        assert "changefeed_state.changefeed_bucket in (" in statement, statement
        found = re.search(r"xxhash64\(changefeed_state\.`order_id`\) in \(([^)]*)\)", statement)
        if (fmt, model) in UNFILTERED:
            assert found is None and "xxhash64(changefeed_state" not in statement, statement
        else:
            assert found, statement
            assert {h.strip() for h in found.group(1).split(",")} == batch_3
        forms.add((fmt, model))
    assert len(forms) == 4, forms
