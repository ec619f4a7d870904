"""Invariant O8 end to end: PostgreSQL feeds with row images whose transactions change the
same keys concurrently (tests/support/interleave.py: an update after an update, a
re-insert after a delete, a delete after an update, each with a late commit), landed into
Spark and consumed by ``changefeed_history`` (``versions='event'``) and
``changefeed_current_state`` models on parquet, Delta and Iceberg.

The source's own rows say in which order the writes to each key took effect; every
history must list the key's versions in that order, each with the row its write left, and
every current state must equal the source row for row. Both writer modes: outbox with
``capture: trigger`` on every format (a mover that orders transactions by their first
outbox row fails it on each), and blocking (the client passes each image), whose order
the shard's lock makes, on parquet.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from tests.support import interleave
from tests.support.dbt_harness import package_project
from tests.support.dbt_spark import SCHEMA_MACRO, fresh_projects, run_all
from tests.support.pg_feeds import create_table, setup_feed, teardown_feed

from changefeed.spark.landing import land

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

SOURCE = "cf_keyorder_src"
LANDED = "cf_keyorder_land"
#: landed table -> (mode, setup options, writer of interleave.Writer, state formats). The
#: mover's order is the outbox feed's; the blocking feed is consumed on parquet only.
FEEDS: dict[str, tuple[str, dict[str, Any], str, tuple[str, ...]]] = {
    "blocking": ("blocking", {"row_image": True}, "blocking", ("parquet",)),
    "capture": (
        "outbox", {"capture": "trigger", "row_image": True}, "capture",
        ("parquet", "delta", "iceberg"),
    ),
}  # fmt: skip
CASES = [(feed, fmt) for feed, spec in FEEDS.items() for fmt in spec[3]]
#: one dbt project per current catalog (tests/test_spark_lakehouse.py)
PROJECTS = {"parquet": ("parquet", "delta"), "iceberg": ("iceberg",)}
FORMATS = ("parquet", "delta", "iceberg")
KINDS = {
    "history": "materialized='changefeed_history', versions='event'",
    "current": "materialized='changefeed_current_state'",
}

MODEL = """{{{{ config({kind}, unique_key='id', file_format='{fmt}',
    schema='{schema}', alias='{name}', buckets=2) }}}}
select e.shard_id, e.ulid, e.id, e.payload, e.changefeed_feed_batch
from {{{{ changefeed.feed_events(api.Relation.create(schema='spark_catalog.{landed}',
    identifier='{feed}'), this) }}}} as e
"""


def schema_of(fmt: str) -> str:
    return f"cf_keyorder_{fmt}"


def project(catalog: str, root: Any) -> Any:
    models = {
        f"{feed}_{kind}_{fmt}.sql": MODEL.format(
            kind=config, fmt=fmt, schema=schema_of(fmt), name=f"{feed}_{kind}",
            landed=LANDED, feed=feed,
        )
        for fmt in PROJECTS[catalog]
        for feed in FEEDS
        if fmt in FEEDS[feed][3]
        for kind, config in KINDS.items()
    }  # fmt: skip
    path = package_project(root / f"project-{catalog}", f"changefeed_keyorder_{catalog}", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


@pytest.fixture(scope="module")
def scenario(
    spark: Any, dbt: Any, pg_uri: str, admin: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The histories written to each feed, landed once, consumed once per format."""
    from tests.support.dbt_spark import current_catalog

    harnesses = fresh_projects(
        spark, LANDED, {fmt: schema_of(fmt) for fmt in FORMATS},
        tmp_path_factory.mktemp("keyorder"), project, PROJECTS,
    )  # fmt: skip
    out: dict[str, Any] = {}
    for feed, (mode, options, writer, _) in FEEDS.items():
        create_table(admin, SOURCE, feed, interleave.COLUMNS)
        teardown_feed(dbt, SOURCE, feed)
        setup_feed(dbt, SOURCE, feed, mode, **options)
        interleave.run(pg_uri, writer, f"{SOURCE}.{feed}")
        options_ = {"connection": pg_uri, "feed": f"{SOURCE}.{feed}", "payload": "true"}
        assert land(spark, options_, f"{LANDED}.{feed}").batch == 1
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            out[feed] = {"source": interleave.source_rows(conn, f"{SOURCE}.{feed}")}
    run_all(spark, harnesses)
    for feed, fmt in CASES:
        table = f"{schema_of(fmt)}.{feed}"
        with current_catalog(spark, fmt):
            history = spark.sql(
                f"select id, payload.val, changefeed_deleted from {table}_history order by id, ulid"
            ).collect()
            current = spark.sql(
                f"select id, payload.val, changefeed_deleted from {table}_current"
            ).collect()
        out[feed][fmt] = {"history": [tuple(r) for r in history],
                          "current": [tuple(r) for r in current]}  # fmt: skip
    return out


@pytest.mark.parametrize(("feed", "fmt"), CASES)
def test_history_lists_each_keys_versions_in_the_order_its_writes_took_effect(
    scenario: dict[str, Any], feed: str, fmt: str
) -> None:
    source = scenario[feed]["source"]
    want = interleave.expected(source)
    if FEEDS[feed][0] != "blocking":
        assert all(v[-1][0] == "a" for v in want.values()), "the late commit took effect last"
    versions: dict[int, list[str | None]] = {}
    for key, val, deleted in scenario[feed][fmt]["history"]:
        versions.setdefault(int(key), []).append(None if deleted else val)
    for key, expected_versions in want.items():
        assert versions[key] == [val for _, val in expected_versions], f"key {key}"
    markers = {h.marker for h in interleave.HISTORIES}
    assert {k: v for k, v in versions.items() if k in markers} == {k: ["a"] for k in markers}


@pytest.mark.parametrize(("feed", "fmt"), CASES)
def test_current_state_equals_the_source(scenario: dict[str, Any], feed: str, fmt: str) -> None:
    current = scenario[feed][fmt]["current"]
    live = {int(key): val for key, val, deleted in current if not deleted}
    assert live == scenario[feed]["source"]
    gone = {int(key) for key, _, deleted in current if deleted}
    assert gone == set(interleave.KEYS) - set(scenario[feed]["source"])
