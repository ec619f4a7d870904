"""Exact history from row images, for real: PostgreSQL feeds landed into Spark and
consumed by ``changefeed_history`` (docs/spark.md "Current state and history").

Three feeds of the same source rows, written the same way: blocking with row images
(the client passes each row), outbox with ``capture: trigger`` and row images, and
outbox with capture but no images. Between two landings one key is updated three times
(three transactions), another deleted, a third inserted. With images, every landed event
carries the row as of its write and the history (``versions='event'``) has one version
per change, a delete closing the version before it; without images the events of one
key in one landing carry the row as the landing read it and the history has one version
per key and landing (the documented landing granularity). An independent Python model
of the writes and of the history rules gives the expected tables. A bad ``versions`` fails
before any statement, naming the accepted values.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from tests.support import row_image_types
from tests.support.dbt_harness import DbtError, DbtHarness, package_project
from tests.support.dbt_spark import SCHEMA_MACRO
from tests.support.pg_feeds import create_table, setup_feed, teardown_feed

from changefeed.client import PostgresFeed
from changefeed.spark.landing import land

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SOURCE = "cf_rowimg"
LANDED = "cf_rowimg_land"
HISTORY = "cf_rowimg_hist"
FEEDS = {"blocking": "blocking", "outbox": "outbox", "plain": "outbox"}
IMAGES = {"blocking": True, "outbox": True, "plain": False}
Row = tuple[int, str, Decimal]
#: the writes of each round, one transaction each: (key, the row after it, None: deleted)
ROUNDS: list[list[tuple[int, Row | None]]] = [
    [(1, (1, "new", Decimal("10.00"))), (2, (2, "new", Decimal("5.00")))],
    [
        (1, (1, "paid", Decimal("10.00"))),
        (1, (1, "packed", Decimal("10.00"))),
        (1, (1, "packed", Decimal("12.50"))),
        (2, None),
        (3, (3, "new", Decimal("1.25"))),
    ],
]

#: model -> (its config, the error it must fail with, before any statement)
BAD_VERSIONS = {
    "bad_versions": (
        "materialized='changefeed_history', versions='sometimes'",
        "versions must be one of batch, event (got sometimes)",
    ),
    "bad_versions_current": (
        "materialized='changefeed_current_state', versions='event'",
        "versions is a setting of materialized='changefeed_history' only",
    ),
}

MODEL = """{{{{ config(materialized='changefeed_history', unique_key='order_id',
    schema='{schema}', alias='{name}', buckets=2{versions}) }}}}
select e.shard_id, e.ulid, e.order_id, e.payload, e.changefeed_feed_batch
from {{{{ changefeed.feed_events(api.Relation.create(schema='spark_catalog.{landed}',
    identifier='{name}'), this) }}}} as e
"""


def write(conn: psycopg.Connection[Any], name: str, key: int, row: Row | None) -> None:
    """One transaction that leaves ``key`` as ``row`` (None: deleted); a blocking writer
    passes the row image itself, a captured one only writes the source."""
    table = f"{SOURCE}.{name}"
    change = (
        (f"delete from {table} where order_id = %s", (key,))
        if row is None
        else (
            f"insert into {table} values (%s, %s, %s) on conflict (order_id) do update "
            "set status = excluded.status, amount = excluded.amount",
            row,
        )
    )
    if FEEDS[name] == "outbox":
        with conn.transaction():
            conn.execute(*change)
        return
    with PostgresFeed(f"{SOURCE}.{name}").write(conn, 0) as w:
        conn.execute(*change)
        image = (
            None if row is None else dict(zip(("order_id", "status", "amount"), row, strict=True))
        )
        w.insert_events([(key,)], images=[image])


def landed(spark: Any, name: str) -> list[tuple[Any, ...]]:
    """(ulid, key, payload row or None, landing batch) of the landed events, in order."""
    rows = spark.sql(
        f"select ulid, order_id, payload.order_id, payload.status, payload.amount, "
        f"payload is null, changefeed_batch from spark_catalog.{LANDED}.{name} order by ulid"
    ).collect()
    return [(bytes(r[0]), r[1], None if r[5] else (r[2], r[3], r[4]), r[6]) for r in rows]


def history(spark: Any, name: str) -> set[tuple[Any, ...]]:
    rows = spark.sql(
        f"select lower(hex(ulid)), order_id, payload.status, payload.amount, changefeed_deleted, "
        f"unix_millis(valid_from), unix_millis(valid_to) from spark_catalog.{HISTORY}.{name}"
    ).collect()
    return {tuple(r) for r in rows}


def expected_history(events: list[tuple[Any, ...]], per_event: bool) -> set[tuple[Any, ...]]:
    """The SCD2 rules (protocol 11.8) over landed events: a version per event, or per key and
    landing (the newest event of each), valid_to the next version's valid_from."""
    chosen: dict[tuple[int, Any], tuple[Any, ...]] = {}
    for e in events:  # in ULID order: a later event of the grain replaces an earlier one
        chosen[(e[1], e[0] if per_event else e[3])] = e
    out = set()
    for key in {k for k, _ in chosen}:
        versions = sorted((v for (k, _), v in chosen.items() if k == key), key=lambda v: v[0])
        for i, (u, k, row, _) in enumerate(versions):
            start = int.from_bytes(u[:6], "big")
            end = int.from_bytes(versions[i + 1][0][:6], "big") if i + 1 < len(versions) else None
            status, amount = (row[1], row[2]) if row else (None, None)
            out.add((u.hex(), k, status, amount, row is None, start, end))
    return out


@pytest.fixture(scope="module")
def scenario(
    spark: Any, dbt: Any, pg_uri: str, admin: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Both rounds written and landed, then consumed: the landed events and histories."""
    for name, mode in FEEDS.items():
        create_table(
            admin, SOURCE, name, "order_id bigint primary key, status text, amount numeric(8,2)"
        )
        teardown_feed(dbt, SOURCE, name)
        capture = {"capture": "trigger"} if mode == "outbox" else {}
        setup_feed(dbt, SOURCE, name, mode, row_image=IMAGES[name], **capture)
    for schema in (LANDED, HISTORY):
        spark.sql(f"drop schema if exists spark_catalog.{schema} cascade")
        spark.sql(f"create schema spark_catalog.{schema}")
    root = tmp_path_factory.mktemp("rowimg")
    models = {
        f"{name}.sql": MODEL.format(
            schema=HISTORY, name=name, landed=LANDED,
            versions=", versions='event'" if IMAGES[name] else "",
        )
        for name in FEEDS
    }  # fmt: skip
    for name, config in BAD_VERSIONS.items():
        models[f"{name}.sql"] = (
            f"{{{{ config(unique_key='order_id', schema='{HISTORY}', {config[0]}) }}}}\n"
            "select e.shard_id, e.ulid, e.order_id, e.payload, e.changefeed_feed_batch from "
            f"{{{{ changefeed.feed_events(api.Relation.create(schema='spark_catalog.{LANDED}', "
            "identifier='plain'), this) }} as e\n"
        )
    path = package_project(root / "project", "changefeed_rowimg", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    harness = DbtHarness(root / "dbt", spark=lambda: spark, project_dir=path)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for number, writes in enumerate(ROUNDS, start=1):
            for key, row in writes:
                for name in FEEDS:
                    write(conn, name, key, row)
            for name in FEEDS:
                options = {"connection": pg_uri, "feed": f"{SOURCE}.{name}", "payload": "true"}
                assert land(spark, options, f"{LANDED}.{name}").batch == number
    # One run consumes both landings (a dbt run on Spark is the expensive step).
    harness.invoke(["run", "--select", *FEEDS], "spark")
    out: dict[str, Any] = {
        name: {"landed": landed(spark, name), "history": history(spark, name)} for name in FEEDS
    }
    out["harness"] = harness
    return out


@pytest.mark.parametrize("name", ["blocking", "outbox"])
def test_row_images_land_each_write_and_history_is_exact(
    scenario: dict[str, Any], name: str
) -> None:
    events = scenario[name]["landed"]
    writes = [(key, row, number) for number, round_ in enumerate(ROUNDS, 1) for key, row in round_]
    assert [(e[1], e[2], e[3]) for e in events] == writes, "one event per write, in its landing"
    final = scenario[name]["history"]
    assert final == expected_history(events, per_event=True)
    key1 = sorted((v for v in final if v[1] == 1), key=lambda v: v[5])
    assert [(v[2], v[3]) for v in key1] == [
        ("new", Decimal("10.00")), ("paid", Decimal("10.00")),
        ("packed", Decimal("10.00")), ("packed", Decimal("12.50")),
    ], "one version per change, each with the row of its write"  # fmt: skip
    key2 = sorted((v for v in final if v[1] == 2), key=lambda v: v[5])
    assert [v[4] for v in key2] == [False, True] and key2[0][6] == key2[1][5], (
        "the delete closes the version before it"
    )


def test_without_row_images_history_has_landing_granularity(scenario: dict[str, Any]) -> None:
    events = scenario["plain"]["landed"]
    second = [e for e in events if e[3] == 2]
    assert [e[1] for e in second] == [1, 1, 1, 2, 3]
    # Every event of key 1 in the second landing carries the row the landing read.
    assert {e[2] for e in second if e[1] == 1} == {(1, "packed", Decimal("12.50"))}
    assert scenario["plain"]["history"] == expected_history(events, per_event=False)
    key1 = [v for v in scenario["plain"]["history"] if v[1] == 1]
    assert len(key1) == 2, "one version of key 1 per landing, the intermediate rows are not seen"


def test_versions_is_checked_before_any_statement(scenario: dict[str, Any]) -> None:
    with pytest.raises(DbtError) as failed:
        scenario["harness"].invoke(["run", "--select", *BAD_VERSIONS], "spark")
    for name, (_, message) in BAD_VERSIONS.items():
        assert message in str(failed.value), name


def test_every_value_an_image_holds_lands_in_spark(
    spark: Any, dbt: Any, pg_uri: str, admin: Any
) -> None:
    """The type matrix of tests/support/row_image_types.py, written through both writer
    paths and landed: infinities and NaN as Spark doubles and floats, numerics beyond a
    Spark decimal and numeric NaN/Infinity as their text, bytes, instants of odd offsets,
    arrays of decimals as text; the same payloads from the client's images and the
    capture's."""
    schema = "cf_rowimg_types"
    row_image_types.create(dbt, admin, schema)
    row_image_types.write(pg_uri, schema)
    spark.sql(f"create schema if not exists spark_catalog.{LANDED}")
    landed = {}
    for table in row_image_types.TABLES:
        spark.sql(f"drop table if exists spark_catalog.{LANDED}.{table}")
        options = {"connection": pg_uri, "feed": f"{schema}.{table}", "payload": "true"}
        land(spark, options, f"{LANDED}.{table}")
        rows = spark.sql(
            "select p.id, p.f8, p.f4, p.big, p.wide, p.amount, p.bin, unix_micros(p.tstz), p.ts, "
            f"p.nums, p.pair, p.dom from (select payload as p, ulid from "
            f"spark_catalog.{LANDED}.{table}) order by ulid"
        ).collect()
        # NaN compared as what it is (NaN != NaN).
        landed[table] = [
            tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows
        ]
    assert landed["typed_client"] == landed["typed_capture"]
    events = landed["typed_client"]
    assert [e[:4] for e in events] == [
        (1, 1.5, pytest.approx(0.1), "123456789012345678901234567890.1234567890"),
        (2, math.inf, -math.inf, "NaN"),
        (3, "NaN", "NaN", "Infinity"),
        (1, -math.inf, pytest.approx(0.1), "-Infinity"),
    ]
    first = events[0]
    assert first[4:7] == (
        "1234567890123456789012345678901234.56789", Decimal("12.34"), bytearray(b"\x00\xff\x10")
    )  # fmt: skip
    assert [e[7] for e in events] == [
        1717223400500000,  # 2024-06-01 12:00:00.5+05:30
        -618059730000000,  # 1950-06-01 12:00:00 at -00:44:30
        None,
        946634400000000,  # 2000-01-01 00:00:00+14
    ]
    assert events[1][8] == datetime(99, 12, 31, 23, 59, 59)
    assert first[9:] == ('[1.5,"NaN","-Infinity"]', '(1,"x""y")', "5.50")
