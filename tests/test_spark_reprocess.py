"""Range re-processing of the state consumers (``changefeed_reprocess``; docs/spark.md
"Re-processing a range", protocol 11.9), run for real on parquet, Delta and Iceberg.

A current-state and a history model per format consume a landed feed. Their select then
changes (statuses upper-cased, one key filtered out) and a time range is re-processed:
every key with an event in the range, or with a held row in it, must then be what a full
refresh with the new select gives it (a key the new select drops is removed), every other
key is untouched, and the cursor does not move. The re-processing is first interrupted
(before the merge; on parquet between two buckets' partition switches) and re-run, then
run again with the same range written as ULIDs (the same state). A normal run afterwards
goes on from the cursor. Bad ranges and models that cannot be re-processed fail naming the
fix, before any statement.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from tests.support.dbt_harness import DbtError, DbtHarness, package_project
from tests.support.dbt_spark import SCHEMA_MACRO, current_catalog, fresh_projects, run_all
from tests.support.doc_blocks import block

from changefeed.ulid import encode_one

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500)]

SOURCE = "cf_rp_src"
FEED = f"{SOURCE}.landed"
FEED_REF = "api.Relation.create(schema='spark_catalog." + SOURCE + "', identifier='landed')"
FORMATS = ("parquet", "delta", "iceberg")
PROJECTS = {"parquet": ("parquet", "delta"), "iceberg": ("iceberg",)}


def at(day: str, second: int) -> int:
    """Epoch milliseconds of ``second`` seconds after midnight UTC of ``day``."""
    from datetime import datetime, timezone

    midnight = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    return int(midnight.timestamp()) * 1000 + second * 1000


#: (epoch ms, order_id, status; None: the key is gone) per feed batch.
BATCHES: dict[int, list[tuple[int, int, str | None]]] = {
    1: [(at("2025-12-20", key), key, "a") for key in range(1, 7)],
    2: [(at("2026-01-10", 20), 1, "b"), (at("2026-01-10", 21), 2, "b"),
        (at("2026-01-31", 22), 3, None)],
    3: [(at("2026-02-01", 0), 4, "c"), (at("2026-02-05", 31), 7, "x")],
    4: [(at("2026-02-10", 40), 1, "d")],
}
#: the re-processed range, docs/spark.md's (its command, by digest): the events of batch 2
#: (keys 1, 2 and 3); batch 3 starts exactly at its exclusive end
DOC_COMMAND = ("docs/spark.md", "333f61cf54c9")
RANGE = (at("2026-01-01", 0), at("2026-02-01", 0))
NEW_SELECT = {"cf_upper": True, "cf_drop": 2}

MODEL = """{{{{ config(materialized='{materialized}', file_format='{fmt}', schema='cf_rp_{fmt}',
    alias='{alias}', unique_key='order_id', buckets=4, delete_when='status is null'{extra}) }}}}
select e.shard_id, e.ulid, e.order_id,
    {{% if var('cf_upper', false) %}}upper(e.payload.status)
    {{% else %}}e.payload.status{{% endif %}} as status,
    e.changefeed_feed_batch
from {{{{ changefeed.feed_events({feed}, this) }}}} as e
{{% if var('cf_drop', none) is not none %}}where e.order_id != {{{{ var('cf_drop') }}}}{{% endif %}}
"""
APPEND = """{{ config(materialized='incremental', file_format='parquet', schema='cf_rp_parquet',
    incremental_strategy='insert_overwrite', partition_by=['changefeed_batch']) }}
select e.*, {{ changefeed.feed_batch() }} as changefeed_batch
from {{ changefeed.feed_events(FEED, this if is_incremental() else none) }} as e
""".replace("FEED", FEED_REF)

#: an append consumer as docs/spark.md writes one: feed_safe_point and feed_cursor
CURSORED = """{{ config(materialized='incremental', file_format='parquet', schema='cf_rp_parquet',
    incremental_strategy='insert_overwrite', partition_by=['changefeed_batch']) }}
select e.shard_id, e.ulid, e.order_id, e.changefeed_batch as changefeed_feed_batch,
    {{ changefeed.feed_batch() }} as changefeed_batch
from {{ FEED }} as e
where {{ changefeed.feed_safe_point(FEED, 'e') }}
{% if is_incremental() %} and {{ changefeed.feed_cursor('e') }} {% endif %}
""".replace("FEED", FEED_REF)

#: a state model that reads the feed as a dbt source, so that its feed (and the feed's
#: retention horizon) is known
SOURCES = f"""version: 2
sources:
  - name: rp
    schema: {SOURCE}
    tables:
      - name: landed
"""
RETAINED = """{{ config(materialized='changefeed_current_state', file_format='parquet',
    schema='cf_rp_parquet', alias='retained', unique_key='order_id', buckets=4,
    delete_when='status is null') }}
select e.shard_id, e.ulid, e.order_id, e.payload.status as status, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('rp', 'landed'), this) }} as e
"""

Event = tuple[int, bytes, int, "str | None", int]


def ulid(millis: int, key: int) -> bytes:
    return millis.to_bytes(6, "big") + key.to_bytes(10, "big")


def events(upto: int, upper: bool = False, drop: int | None = None) -> list[Event]:
    """(shard, ulid, key, status, feed batch) of batches 1..upto, through a select."""
    out = []
    for batch in range(1, upto + 1):
        for t, key, status in BATCHES[batch]:
            if key == drop:
                continue
            shown = status.upper() if upper and status is not None else status
            out.append((0, ulid(t, key), key, shown, batch))
    return out


def current(evs: list[Event]) -> dict[int, tuple[Any, ...]]:
    newest: dict[int, Event] = {}
    for e in evs:
        if e[2] not in newest or e[1] > newest[e[2]][1]:
            newest[e[2]] = e
    return {k: {(s, u.hex(), k, st, b, st is None)} for k, (s, u, _, st, b) in newest.items()}


def history(evs: list[Event]) -> dict[int, set[tuple[Any, ...]]]:
    out: dict[int, set[tuple[Any, ...]]] = {}
    for key in {e[2] for e in evs}:
        versions = sorted((e for e in evs if e[2] == key), key=lambda e: e[1])
        rows = set()
        for i, (s, u, k, st, b) in enumerate(versions):
            start = int.from_bytes(u[:6], "big")
            end = int.from_bytes(versions[i + 1][1][:6], "big") if i + 1 < len(versions) else None
            rows.add((s, u.hex(), k, st, b, st is None, start, end))
        out[key] = rows
    return out


def flat(per_key: dict[int, Any]) -> set[tuple[Any, ...]]:
    return {row for rows in per_key.values() for row in rows}


def reprocessed(name: str, upto: int) -> set[tuple[Any, ...]]:
    """``name`` ('current' or 'history') after re-processing RANGE with NEW_SELECT: the
    touched keys as a full refresh with the new select builds them, the others as before."""
    build: Callable[[list[Event]], dict[int, Any]] = current if name == "current" else history
    old = build(events(upto))
    new = build(events(upto, upper=True, drop=2))
    low, high = (r.to_bytes(6, "big") + bytes(10) for r in RANGE)
    touched = {e[2] for e in events(upto) if low <= e[1] < high}
    return flat({k: rows for k, rows in old.items() if k not in touched}) | flat(
        {k: rows for k, rows in new.items() if k in touched}
    )


# -- running -------------------------------------------------------------------------------


def land(spark: Any, batch: int) -> None:
    from changefeed.spark.feedtable import write_batch

    rows = [(0, ulid(t, k), k, None if st is None else (st,)) for t, k, st in BATCHES[batch]]
    frame = spark.createDataFrame(
        rows, "shard_id int, ulid binary, order_id bigint, payload struct<status:string>"
    )
    assert write_batch(spark, FEED, frame) == batch


def project(catalog: str, root: Any) -> Any:
    models = {}
    for fmt in PROJECTS[catalog]:
        for materialized, alias in (("changefeed_current_state", "current"),
                                    ("changefeed_history", "history")):  # fmt: skip
            models[f"{alias}_{fmt}.sql"] = MODEL.format(
                materialized=materialized, fmt=fmt, alias=alias, feed=FEED_REF, extra=""
            )
    if catalog == "parquet":
        models[f"{LAYERED}_parquet.sql"] = MODEL.format(
            materialized="changefeed_current_state", fmt="parquet", alias=LAYERED, feed=FEED_REF,
            extra=", parquet_layout='layers'",
        )
        models["appended.sql"] = APPEND
        models["cursored.sql"] = CURSORED
        models["retained.sql"] = RETAINED
        models["sources.yml"] = SOURCES
    path = package_project(root / f"project-{catalog}", f"changefeed_rp_{catalog}", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


def run(
    spark: Any,
    harnesses: dict[str, DbtHarness],
    variables: dict[str, Any] | None = None,
    **interrupt: Any,
) -> None:
    """The state models of every project (``variables`` as --vars)."""
    args = ["--exclude", "appended", "cursored", "retained"]
    run_all(spark, harnesses, *args, *(["--vars", json.dumps(variables)] if variables else []),
            **interrupt)  # fmt: skip


def tables(spark: Any, fmt: str) -> dict[str, Any]:
    schema = f"cf_rp_{fmt}"
    event = "shard_id, lower(hex(ulid)), order_id, status, changefeed_feed_batch"
    with current_catalog(spark, fmt):
        out = {
            "current": {tuple(r) for r in spark.sql(
                f"select {event}, changefeed_deleted from {schema}.current").collect()},
            "history": {tuple(r) for r in spark.sql(
                f"select {event}, changefeed_deleted, unix_millis(valid_from), "
                f"unix_millis(valid_to) from {schema}.history").collect()},
            "cursors": [tuple(r) for r in spark.sql(
                "select changefeed_batch, changefeed_feed_batch "
                f"from {schema}.current__changefeed_cursor order by 1").collect()],
        }  # fmt: skip
        if fmt == "parquet":
            out[LAYERED] = {tuple(r) for r in spark.sql(
                f"select {event}, changefeed_deleted from {schema}.{LAYERED}").collect()}
            out[LAYERED + " cursors"] = [tuple(r) for r in spark.sql(
                "select changefeed_batch, changefeed_feed_batch "
                f"from {schema}.{LAYERED}__changefeed_cursor order by 1").collect()]
            out[LAYERED + " layers"] = len(spark.sql(
                f"show partitions {schema}.{LAYERED}__changefeed_layers").collect())
        return out


def documented_range() -> dict[str, Any]:
    """The ``--vars`` of docs/spark.md's re-processing command (dbt run -s <models> --vars)."""
    tokens = shlex.split(block(*DOC_COMMAND))
    assert tokens[:3] == ["dbt", "run", "-s"] and tokens[-2] == "--vars", tokens
    variables = yaml.safe_load(tokens[-1])
    bounds = variables["changefeed_reprocess"]
    assert (at(bounds["from"], 0), at(bounds["to"], 0)) == RANGE, "the data fits the docs' range"
    return dict(variables)


def as_ulid(millis: int) -> str:
    return encode_one(millis.to_bytes(6, "big") + bytes(10))


#: the apply statement (parquet: writing the new bucket directories); a parquet bucket's
#: switch; a layered state's view, which follows the registration of its compacted layer
#: (the first group that matches names the model)
BEFORE_APPLY = r"\b(insert overwrite table \S+__changefeed_next |merge into )"
SWITCH = (
    r"\balter table (\S+) (?:partition \(changefeed_bucket = \d+\) set location"
    r"|drop if exists partition \(changefeed_bucket )"
    r"|\balter table (\S+?)__changefeed_layers add partition "
    r"|\bcreate or replace view (\S+) as\b"
)
#: the parquet project's current state with parquet_layout='layers'
LAYERED = "current_layers"
TIME_RANGE = documented_range()
ULID_RANGE = {"changefeed_reprocess": {"from": as_ulid(RANGE[0]), "to": as_ulid(RANGE[1])}}


@pytest.fixture(scope="module")
def scenario(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("reprocess")
    schemas = {fmt: f"cf_rp_{fmt}" for fmt in FORMATS}
    harnesses = fresh_projects(spark, SOURCE, schemas, root, project, PROJECTS)
    seen: dict[str, Any] = {"harnesses": harnesses}

    def snap(step: str) -> None:
        seen[step] = {fmt: tables(spark, fmt) for fmt in FORMATS}

    for batch in (1, 2, 3):
        land(spark, batch)
    run(spark, harnesses)
    snap("consumed")
    new_select = {**TIME_RANGE, **NEW_SELECT}
    run(spark, harnesses, new_select, fail_at=BEFORE_APPLY)
    snap("interrupted")
    # parquet: between two buckets' partition switches
    run(spark, {"parquet": harnesses["parquet"]}, new_select, fail_at=SWITCH, let_through=1)
    snap("half switched")
    run(spark, harnesses, new_select)
    snap("reprocessed")
    run(spark, harnesses, {**ULID_RANGE, **NEW_SELECT})
    snap("again as ULIDs")
    land(spark, 4)
    run(spark, harnesses)
    snap("then a normal run")
    return seen


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["current", "history"])
def test_the_range_is_rebuilt_as_a_full_refresh_would_and_the_rest_is_untouched(
    scenario: dict[str, Any], fmt: str, name: str
) -> None:
    build = current if name == "current" else history
    assert scenario["consumed"][fmt][name] == flat(build(events(3)))
    assert scenario["interrupted"][fmt][name] == flat(build(events(3))), "nothing was written"
    want = reprocessed(name, 3)
    assert scenario["reprocessed"][fmt][name] == want
    statuses = {(row[2], row[3]) for row in want}
    assert not {k for k, _ in statuses if k == 2}, "the key the new select drops is gone"
    assert (1, "B") in statuses and (3, None) in statuses, "touched keys are rebuilt"
    assert (4, "c") in statuses and (4, "C") not in statuses, "other keys are untouched"
    assert scenario["again as ULIDs"][fmt][name] == want, "the same range as ULIDs"


@pytest.mark.parametrize("fmt", FORMATS)
def test_re_processing_leaves_the_cursor_and_a_normal_run_goes_on(
    scenario: dict[str, Any], fmt: str
) -> None:
    for step in ("interrupted", "reprocessed", "again as ULIDs"):
        assert scenario[step][fmt]["cursors"] == [(1, 3)], step
    after = scenario["then a normal run"][fmt]
    assert after["cursors"] == [(1, 3), (2, 4)]
    # batch 4 went through the old select: key 1 is 'd' again, the rest as re-processed
    key1 = {row for row in after["current"] if row[2] == 1}
    assert [(row[3], row[4]) for row in key1] == [("d", 4)]
    others = {row for row in after["current"] if row[2] != 1}
    assert others == {row for row in reprocessed("current", 3) if row[2] != 1}


def test_a_layered_state_is_re_processed_by_a_compaction(scenario: dict[str, Any]) -> None:
    """parquet_layout='layers': the re-processing writes the whole state, touched keys
    rebuilt, as one layer (protocol 11.9). Cut between that layer's registration and the
    view's move to it, the old view resolves each key to its held row or its rebuilt one
    (a rebuilt row of the same event wins, a key the new select drops keeps its row)."""
    steps = [(step, scenario[step]["parquet"]) for step in
             ("consumed", "interrupted", "half switched", "reprocessed", "again as ULIDs",
              "then a normal run")]  # fmt: skip
    seen = dict(steps)
    assert seen["consumed"][LAYERED] == flat(current(events(3)))
    assert seen["interrupted"][LAYERED] == flat(current(events(3))), "nothing was written"
    before, after = current(events(3)), {}
    for row in reprocessed("current", 3):
        after.setdefault(row[2], set()).add(row)
    half = seen["half switched"][LAYERED]
    for key in set(before) | set(after):
        rows = {row for row in half if row[2] == key}
        assert rows in (before.get(key, set()), after.get(key, set())), key
    assert half != flat(before) and half != flat(after), "cut in the middle"
    assert seen["half switched"][LAYERED + " layers"] == 2, "the base and the compacted layer"
    for step in ("reprocessed", "again as ULIDs"):
        assert seen[step][LAYERED] == reprocessed("current", 3), step
        assert seen[step][LAYERED + " layers"] == 1, f"{step}: the older layers are dropped"
    for step, tables_ in steps[:-1]:
        assert tables_[LAYERED + " cursors"] == [(1, 3)], step
    assert seen["then a normal run"][LAYERED] == seen["then a normal run"]["current"]
    assert seen["then a normal run"][LAYERED + " cursors"] == [(1, 3), (2, 4)]


def test_a_parquet_re_processing_cut_between_bucket_switches_is_old_or_new_per_key(
    scenario: dict[str, Any],
) -> None:
    half = scenario["half switched"]["parquet"]
    for name in ("current", "history"):
        build = current if name == "current" else history
        before, after = build(events(3)), {}
        for row in reprocessed(name, 3):
            after.setdefault(row[2], set()).add(row)
        for key in set(before) | set(after):
            rows = {row for row in half[name] if row[2] == key}
            assert rows in (before.get(key, set()), after.get(key, set())), (name, key)
        assert half[name] != flat(before) and half[name] != flat(after), "cut in the middle"
    assert scenario["reprocessed"]["parquet"]["current"] == reprocessed("current", 3)


BAD = {
    "not a bound": ({"changefeed_reprocess": {"from": "yesterday"}},
                    "'from' is not a ULID or an ISO-8601 date or time (got yesterday)"),
    "not a mapping": ({"changefeed_reprocess": "2026-01-01"},
                      "changefeed_reprocess must be a mapping {from: <bound>, to: <bound>}"),
    "unknown field": ({"changefeed_reprocess": {"from": "2026-01-01", "until": "2026-02-01"}},
                      "changefeed_reprocess must be a mapping"),
    "backwards": ({"changefeed_reprocess": {"from": "2026-02-01", "to": "2026-01-01"}},
                  "'to' (2026-01-01) must be after 'from' (2026-02-01)"),
    "no such day": ({"changefeed_reprocess": {"from": "2026-02-30"}},
                    "'from' is not a valid date or time from 1970 on (got 2026-02-30)"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_bad_ranges_fail_before_any_statement(
    scenario: dict[str, Any], spark: Any, case: str
) -> None:
    variables, message = BAD[case]
    harness = scenario["harnesses"]["parquet"]
    before = tables(spark, "parquet")
    with pytest.raises(DbtError, match=re.escape(message)):
        harness.invoke(["run", "-s", "current_parquet", "--vars", json.dumps(variables)], "spark")
    assert tables(spark, "parquet") == before


def test_only_state_models_can_be_re_processed(scenario: dict[str, Any], spark: Any) -> None:
    harness = scenario["harnesses"]["parquet"]
    harness.invoke(["run", "-s", "appended", "cursored"], "spark")
    for name in ("appended", "cursored"):
        with pytest.raises(DbtError, match=f"model '{name}' cannot be re-processed"):
            harness.invoke(["run", "-s", name, "--vars", json.dumps(TIME_RANGE)], "spark")
    with pytest.raises(DbtError, match="--full-refresh rebuilds every key and changefeed_"):
        harness.invoke(["run", "-s", "current_parquet", "--full-refresh", "--vars",
                        json.dumps(TIME_RANGE)], "spark")  # fmt: skip


def test_a_range_whose_rows_retention_removed_is_refused(
    scenario: dict[str, Any], spark: Any
) -> None:
    """Runs last: retention removes the feed's batches 1 to 3. The range's keys 2 and 3
    hold rows of batch 2, which could not be rebuilt any more."""
    from changefeed.spark.feedtable import retain

    harness = scenario["harnesses"]["parquet"]
    harness.invoke(["run", "-s", "retained"], "spark")
    read = "select lower(hex(ulid)), order_id, status from cf_rp_parquet.retained"
    before = {tuple(r) for r in spark.sql(read).collect()}
    assert len(before) == 7, "every key, batches 1 to 4"
    removed = retain(spark, FEED, consumers=[], keep_last=1, override_consumers=True)
    assert spark.sql(f"select min(changefeed_batch) from {FEED}").collect()[0][0] == 4, removed
    with pytest.raises(DbtError, match=r"would rebuild 2 held row\(s\) from events that "
                                       r"retention removed from .* \(feed batches up to 3\)"):
        harness.invoke(["run", "-s", "retained", "--vars", json.dumps(TIME_RANGE)], "spark")
    assert {tuple(r) for r in spark.sql(read).collect()} == before
