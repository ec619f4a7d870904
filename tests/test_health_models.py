"""The feed-health package models (models/changefeed_*_health.sql).

The kill scenario's baseline (tests/support/spark_kill_scenario.py) lands three batches, publishes
two runs, and then runs only one of the landed feed's two consumers after the third
batch, so the two consumers lag by different amounts; then it runs the health models
with ``vars: {changefeed_health_models: true}``. Expected values are computed here from
the landed rows and the dumped tables, not from the health models' own SQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError
from tests.support.spark_kill_scenario import (
    BASE,
    CONSUMER,
    LANDED,
    PUB_CONSUMER,
    PUBLISHED,
    SHORT,
    landed_rows,
)

from changefeed.ulid import encode_one

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def health(kill_scenario_run: dict[str, Any]) -> dict[str, Any]:
    scenario = kill_scenario_run
    result = scenario["results"]["k1"]
    assert result.failure() is None, result.failure()
    return dict(scenario["dumps"]["health"])


def table(dump: dict[str, Any], name: str) -> list[dict[str, Any]]:
    data = dump[f"{BASE}.{name}"]
    assert data is not None, f"{name} was not built"
    return [dict(zip(data["columns"], row, strict=True)) for row in data["rows"]]


def at(ulid_hex: str) -> str:
    ms = int(ulid_hex[:12], 16)
    return dt.datetime.fromtimestamp(ms / 1000).isoformat()


def heads(rows: list[dict[str, Any]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for row in rows:
        out[row["shard_id"]] = max(out.get(row["shard_id"], ""), row["ulid"])
    return out


@pytest.mark.slow
def test_feed_health_per_feed_and_shard(health: dict[str, Any]) -> None:
    rows = {(r["feed"], r["shard_id"]): r for r in table(health, "changefeed_feed_health")}
    landed = [r for n in (1, 2, 3) for r in landed_rows(n)]
    published = table(health, PUBLISHED)
    expected = {
        ("cf_spark.landed_orders", "landed", LANDED): {
            s: (max(r[1].upper() for r in landed if r[0] == s), 9, 3) for s in (0, 1)
        },
        (PUBLISHED, "published", PUBLISHED): {
            s: (h, sum(1 for r in published if r["shard_id"] == s), 2)
            for s, h in heads(published).items()
        },
    }
    assert set(rows) == {(f, s) for (f, _, _), shards in expected.items() for s in shards}
    for (feed, kind, relation), shards in expected.items():
        for shard, (head, events, batches) in shards.items():
            row = rows[(feed, shard)]
            assert row["feed_kind"] == kind and row["feed_relation"] == f"{BASE}.{relation}"
            assert row["head"] == head and row["safe_point"] == head, "Spark: safe point = head"
            assert row["head_ulid"] == encode_one(bytes.fromhex(head))
            assert row["head_at"] == at(head) == row["safe_point_at"]
            assert (row["events"], row["batches"], row["last_batch"]) == (events, batches, batches)


@pytest.mark.slow
def test_consumer_health_cursor_and_lag(health: dict[str, Any]) -> None:
    rows = {(r["consumer"], r["shard_id"]): r for r in table(health, "changefeed_consumer_health")}
    assert {c for c, _ in rows} == {CONSUMER, SHORT, PUB_CONSUMER}, "the publisher is no consumer"
    landed = [(r[0], r[1].upper()) for n in (1, 2, 3) for r in landed_rows(n)]
    lags = {}
    for consumer, feed_rows in (
        (CONSUMER, landed),
        (SHORT, landed),
        (PUB_CONSUMER, [(r["shard_id"], r["ulid"]) for r in table(health, PUBLISHED)]),
    ):
        cursors = heads(table(health, consumer))
        safe = heads([{"shard_id": s, "ulid": x} for s, x in feed_rows])
        for shard, head in safe.items():
            row = rows[(consumer, shard)]
            cursor = cursors.get(shard)
            unread = sum(1 for s, x in feed_rows if s == shard and x > (cursor or ""))
            feed = PUBLISHED if consumer == PUB_CONSUMER else "cf_spark.landed_orders"
            assert row["feed"] == feed
            assert (row["cursor"], row["safe_point"]) == (cursor, head)
            assert row["cursor_at"] == (at(cursor) if cursor else None)
            assert row["lag_events"] == unread
            lag_ms = int(head[:12], 16) - int((cursor or head)[:12], 16) if unread else 0
            assert row["lag_ms"] == lag_ms
            lags[(consumer, shard)] = (unread, lag_ms)
    # the scenario's point: CONSUMER ran after the 3rd landed batch, SHORT did not
    for shard in (0, 1):
        assert lags[(CONSUMER, shard)] == (0, 0)
        assert lags[(SHORT, shard)] == (3, 1000)
        assert lags[(PUB_CONSUMER, shard)] == (0, 0)


def test_health_sql_without_feeds_is_an_empty_typed_select(spark: Any, dbt: Any) -> None:
    # The shared harness parses without changefeed_spark_it: no feed is enabled there.
    for name, columns in (
        ("_health_feed_sql", ["feed", "feed_relation", "feed_kind", "shard_id", "head",
                              "head_ulid", "head_at", "safe_point", "safe_point_ulid",
                              "safe_point_at", "events", "batches", "last_batch"]),
        ("_health_consumer_sql", ["consumer", "consumer_relation", "feed", "shard_id",
                                  "cursor", "cursor_ulid", "cursor_at", "safe_point",
                                  "safe_point_ulid", "safe_point_at", "lag_events", "lag_ms"]),
    ):  # fmt: skip
        result = spark.sql(dbt.render("{{ changefeed." + name + "() }}", "spark"))
        assert result.columns == columns and result.count() == 0


def test_health_models_are_spark_only(dbt: Any) -> None:
    with pytest.raises(DbtError, match="supports the spark"):
        dbt.render("{{ changefeed._health_consumer_sql() }}", "postgres")


def test_health_models_are_disabled_by_default(dbt: Any) -> None:
    result = dbt.invoke(["ls", "--resource-type", "model", "--output", "name"], "spark")
    names = set(result.result)
    assert "changefeed_feed_health" not in names and "changefeed_consumer_health" not in names
