"""Spark models that publish feeds (changefeed.publish_feed, docs/protocol.md 11.4).

* In-process (the shared ``spark`` session): the generated SQL assigns exactly the ULIDs
  of a Python reference implementation of 11.4, for fresh blocks, a clock going
  backwards, and both headroom boundaries; and the config is validated.
* Subprocess kill scenario (tests/support/spark_kill_scenario.py): a publishing run killed while its
  write job runs, then re-run, leaves the feed identical to uninterrupted runs, ULIDs
  included; a consumer downstream reads it like a landed feed.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError
from tests.support.spark_kill_scenario import (
    BASE,
    HINTS,
    KILL,
    PUB_CONSUMER,
    PUBLISHED,
    SHOP_WAVES,
)
from tests.support.spark_kill_scenario import (
    dumped_rows as rows,
)

pytestmark = pytest.mark.spark

BLOCK = 1 << 36
FEED_ID = "cf_unit.published"


# -- the reference: protocol 11.4 in Python ---------------------------------------------


def reference_block(shard: int, batch: int, head: bytes | None, hint: int) -> tuple[bytes, int]:
    """(ulid_high, block_start) of a publishing run, as protocol 11.4 specifies."""
    continues = False
    t = hint
    if head is not None:
        head_ms = int.from_bytes(head[:6], "big")
        last = (int.from_bytes(head[8:], "big", signed=True) >> 36) << 36
        room = last <= 2**63 - 2**37 if last >= 0 else last <= -(2**37)
        t = max(hint, head_ms)
        if t == head_ms:
            if room:
                continues = True
            else:
                t = head_ms + 1
    if continues:
        assert head is not None
        return head[:8], last + BLOCK
    seed = hashlib.sha256(f"{FEED_ID}|{shard}|{batch}|{t}".encode()).hexdigest()
    high = t.to_bytes(6, "big") + bytes.fromhex(seed[:4])
    r28 = int(seed[4:11], 16)
    start = (r28 % 2**26) * BLOCK
    return high, (start - 2**63 if r28 >= 2**27 else start)


def ulid(ms: int, low: int, rand2: bytes = b"\xab\xcd") -> bytes:
    return ms.to_bytes(6, "big") + rand2 + low.to_bytes(8, "big", signed=True)


HINT = 1_700_000_000_000
#: shard -> (head or None, rows): every branch of 11.4 steps 1-4.
CASES: dict[int, tuple[bytes | None, int]] = {
    0: (None, 3),  # first run: fresh block at the hint
    1: (ulid(HINT - 5, 12345), 2),  # head older than the hint: fresh block
    2: (ulid(HINT + 60_000, 7 * BLOCK + 3), 4),  # clock behind the head: continue its block run
    3: (ulid(HINT, 2**63 - 2**37 + 9), 2),  # same ms, last block that still has room
    4: (ulid(HINT, 2**63 - 2**36 + 1), 2),  # same ms, no room above: headroom rule, t + 1
    5: (ulid(HINT, -(2**37) + 5), 2),  # negative region, room for one more block
    6: (ulid(HINT, -(2**36) + 7), 2),  # negative, next block would reach 0: t + 1
    7: (ulid(HINT, -(2**63)), 1),  # the lowest possible low, same ms
}


def _random_cases(rng: random.Random, first: int, count: int) -> dict[int, tuple[bytes, int]]:
    """Heads around the hint's millisecond, with lows anywhere and near both boundaries."""
    cases: dict[int, tuple[bytes, int]] = {}
    for shard in range(first, first + count):
        ms = HINT + rng.choice([-2, -1, 0, 0, 0, 1, 2])
        low = rng.choice(
            [
                rng.randrange(-(2**63), 2**63),
                rng.randrange(-(2**37), 2**37),
                2**63 - rng.randrange(1, 2**38),
                -(2**63) + rng.randrange(0, 2**38),
            ]
        )
        cases[shard] = (ulid(ms, low, rng.randbytes(2)), rng.randrange(1, 4))
    return cases


@pytest.fixture(scope="module")
def published(spark: Any, dbt: Any) -> dict[int, list[tuple[int, bytes, int]]]:
    """Run the rendered publishing SQL over crafted heads; return rows per shard."""
    cases = {**CASES, **_random_cases(random.Random(20240611), 100, 150)}
    heads = [(s, h, 7) for s, (h, _) in cases.items() if h is not None]
    spark.createDataFrame(heads, "shard_id int, ulid binary, changefeed_batch bigint") \
        .createOrReplaceTempView("cf_unit_heads")  # fmt: skip
    rows = []
    for shard, (_, n) in cases.items():
        # order_id descending per insertion, so the key order (not input order) must win
        rows += [(shard, 1000 - i, f"v{i}") for i in range(n)]
    spark.createDataFrame(rows, "region int, order_id bigint, v string") \
        .createOrReplaceTempView("cf_unit_input")  # fmt: skip
    sql = dbt.render(
        "{{ changefeed._spark_publish_sql('select * from cf_unit_input', "
        "['region', 'order_id', 'v'], ['order_id'], 'region', '" + str(HINT) + "', "
        "'" + FEED_ID + "', 'cf_unit_heads') }}",
        "spark",
    )
    out: dict[int, list[tuple[int, bytes, int]]] = {}
    for row in spark.sql(sql).collect():
        out.setdefault(row["shard_id"], []).append(
            (row["order_id"], bytes(row["ulid"]), row["changefeed_batch"])
        )
    out["cases"] = cases  # type: ignore[index]
    return out


def test_ulids_match_the_reference_exactly(published: dict[Any, Any]) -> None:
    cases = published["cases"]
    assert set(published) - {"cases"} == set(cases)
    for shard, (head, n) in cases.items():
        got = sorted(published[shard])  # by order_id: the key decides the offset
        high, start = reference_block(shard, 8, head, HINT)
        want = [high + (start + i).to_bytes(8, "big", signed=True) for i in range(n)]
        assert [u for _, u, _ in got] == want, f"shard {shard} head {head and head.hex()}"
        assert {b for _, _, b in got} == {8}, "batch = 1 + the highest committed batch"


def test_every_new_ulid_is_above_the_head_and_consecutive(published: dict[Any, Any]) -> None:
    for shard, (head, n) in published["cases"].items():
        ulids = [u for _, u, _ in sorted(published[shard])]
        assert len(set(ulids)) == n
        assert ulids == sorted(ulids), "key order is ULID order"
        if head is not None:
            assert ulids[0] > head, f"shard {shard}: {ulids[0].hex()} <= head {head.hex()}"
        lows = [int.from_bytes(u[8:], "big", signed=True) for u in ulids]
        assert lows == list(range(lows[0], lows[0] + n))
        assert {u[:8] for u in ulids} == {ulids[0][:8]}, "one ulid_high per run and shard"


def test_branches_of_the_block_rule(published: dict[Any, Any]) -> None:
    def first(shard: int) -> bytes:
        return min(u for _, u, _ in published[shard])

    def ms(u: bytes) -> int:
        return int.from_bytes(u[:6], "big")

    def low(u: bytes) -> int:
        return int.from_bytes(u[8:], "big", signed=True)

    for fresh in (0, 1):
        assert ms(first(fresh)) == HINT
        assert low(first(fresh)) % BLOCK == 0, "a fresh block starts aligned to 2^36"
        assert (low(first(fresh)) & (1 << 62)) == 0, "bit 62 is cleared"
    # clock behind the head: same ms as the head, next block after the head's
    assert first(2)[:8] == CASES[2][0][:8]  # type: ignore[index]
    assert low(first(2)) == 8 * BLOCK
    assert low(first(3)) == 2**63 - 2**36  # the last positive block
    assert ms(first(4)) == HINT + 1  # headroom: next millisecond, fresh block
    assert low(first(5)) == -(2**36)  # the last negative block
    assert ms(first(6)) == HINT + 1
    assert low(first(7)) == -(2**63) + BLOCK


def test_first_run_starts_at_batch_one(spark: Any, dbt: Any) -> None:
    spark.createDataFrame([(0, 5, "x")], "region int, order_id bigint, v string") \
        .createOrReplaceTempView("cf_unit_first")  # fmt: skip
    sql = dbt.render(
        "{{ changefeed._spark_publish_sql('select * from cf_unit_first', "
        "['region', 'order_id', 'v'], ['order_id'], '0', '123', 'a.b', none) }}",
        "spark",
    )
    (row,) = spark.sql(sql).collect()
    assert row["changefeed_batch"] == 1 and row["shard_id"] == 0
    assert bytes(row["ulid"])[:6] == (123).to_bytes(6, "big")
    assert list(row.asDict()) == ["shard_id", "ulid", "region", "order_id", "v", "changefeed_batch"]


@pytest.mark.parametrize(
    ("shard", "hint", "message"),
    [
        ("cast(null as int)", "123", "the shard expression gave null for a row"),
        ("0", "cast(null as bigint)", "the time_hint must be epoch milliseconds .* got null"),
        ("0", "-1", "the time_hint must be epoch milliseconds .* got -1"),
        ("0", str(2**48), "the time_hint must be epoch milliseconds"),
    ],
)
def test_rows_that_cannot_be_placed_fail_the_run(
    spark: Any, dbt: Any, shard: str, hint: str, message: str
) -> None:
    """Never a dropped row or a malformed ULID: the statement fails."""
    spark.createDataFrame([(0, 5, "x")], "region int, order_id bigint, v string") \
        .createOrReplaceTempView("cf_unit_bad")  # fmt: skip
    sql = dbt.render(
        "{{ changefeed._spark_publish_sql('select * from cf_unit_bad', "
        "['region', 'order_id', 'v'], ['order_id'], '" + shard + "', '" + hint + "', 'a', none) }}",
        "spark",
    )
    with pytest.raises(Exception, match=message):
        spark.sql(sql).collect()


# -- config validation ------------------------------------------------------------------

INC = "materialized='incremental', "
PARQUET = (
    "materialized='incremental', incremental_strategy='insert_overwrite', "
    "partition_by=['changefeed_batch'], file_format='parquet'"
)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("none", "needs a changefeed config"),
        ("{'mode': 'outbox', 'key': 'a'}", "'mode' (blocking/outbox) applies to PostgreSQL"),
        ("{'key': 'a', 'shards': 'x'}", "unknown changefeed option 'shards'"),
        ("{'key': []}", "changefeed.key must be a column name or a non-empty list"),
        ("{'key': ['a b']}", "every key column must be a column name"),
        ("{'key': ['a', 'A']}", "lists a column twice"),
        ("{'key': 'a', 'time_hint': ''}", "changefeed.time_hint must be a SQL expression"),
    ],
)
def test_publish_options_are_validated(dbt: Any, options: str, message: str) -> None:
    with pytest.raises(DbtError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dbt.render("{{ changefeed._spark_publish_options(" + options + ") }}", "spark")


def test_publish_options_are_normalised(dbt: Any) -> None:
    out = dbt.render(
        "{% set o = changefeed._spark_publish_options({'key': 'a', 'shard': 'pmod(a, 4)'}) %}"
        "{{ o['key'] }}|{{ o['shard'] }}|{{ o['time_hint'] }}",
        "spark",
    )
    assert out == "['a']|pmod(a, 4)|unix_millis(current_timestamp())"


def _rules(config: str) -> str:
    return (
        "{{ config(" + config + ") }}"
        "{% if execute %}{{ changefeed._spark_write_rules('publish_feed') }}{% endif %}"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("materialized='table'", "needs materialized='incremental'"),
        (INC + "incremental_strategy='append', partition_by=['changefeed_batch']",
         "needs incremental_strategy='insert_overwrite'"),
        (INC + "incremental_strategy='insert_overwrite', partition_by=['day']",
         "partitioned by changefeed_batch and nothing else"),
        (INC + "incremental_strategy='insert_overwrite', partition_by=['changefeed_batch', 'day']",
         "partitioned by changefeed_batch and nothing else"),
        (PARQUET + ", location_root='/x'", "location_root makes the table external"),
        ("materialized='incremental', file_format='delta', incremental_strategy='merge', "
         "unique_key='ulid'", "unique_key must include shard_id and ulid"),
        ("materialized='incremental', file_format='iceberg', "
         "incremental_strategy='insert_overwrite'", "use incremental_strategy='merge' \\(or"),
        ("materialized='incremental', file_format='hudi'", "file_format 'hudi' is not supported"),
    ],
)  # fmt: skip
def test_table_config_is_validated(dbt: Any, config: str, message: str) -> None:
    with pytest.raises(DbtError, match=message):
        dbt.render(_rules(config), "spark")


@pytest.mark.parametrize(
    ("config", "fmt"),
    [
        (PARQUET, "parquet"),
        ("materialized='incremental', incremental_strategy='insert_overwrite', "
         "partition_by='changefeed_batch'", "parquet"),
        ("materialized='incremental', file_format='delta', incremental_strategy='merge', "
         "unique_key=['shard_id', 'ulid']", "delta"),
        ("materialized='incremental', file_format='iceberg', incremental_strategy='merge', "
         "unique_key=['ulid', 'shard_id', 'x']", "iceberg"),
        ("materialized='incremental', file_format='delta', incremental_strategy='append'", "delta"),
    ],
)  # fmt: skip
def test_table_config_accepted(dbt: Any, config: str, fmt: str) -> None:
    assert dbt.render(_rules(config), "spark").strip() == fmt


def test_delta_and_iceberg_merge_on_the_event(dbt: Any) -> None:
    """dbt-spark's merge for the config publish_feed and feed_batch require joins on
    (shard_id, ulid); tests/test_spark_lakehouse.py runs it on both formats."""
    for file_format in ("delta", "iceberg"):
        sql = dbt.render(
            "{{ config(materialized='incremental', file_format='" + file_format + "', "
            "incremental_strategy='merge', unique_key=['shard_id', 'ulid']) }}"
            "{% if execute %}{{ changefeed._spark_write_rules('publish_feed') }}{% endif %};"
            "{{ get_merge_sql(api.Relation.create(schema='cf_render', identifier='feed'), "
            "api.Relation.create(identifier='feed__dbt_tmp'), ['shard_id', 'ulid'], none, none) }}",
            "spark",
        )
        flat = " ".join(sql.split())
        assert flat.startswith(file_format + ";")
        assert "merge into cf_render.feed as DBT_INTERNAL_DEST" in flat
        assert "DBT_INTERNAL_SOURCE.shard_id = DBT_INTERNAL_DEST.shard_id and " \
               "DBT_INTERNAL_SOURCE.ulid = DBT_INTERNAL_DEST.ulid" in flat  # fmt: skip
        assert "when not matched then insert *" in flat


def test_post_hook_requires_publish_feed_on_spark(dbt: Any) -> None:
    with pytest.raises(DbtError, match=r"wrapping its select in \{% call changefeed.publish_feed"):
        dbt.render(
            "{{ config(changefeed={'key': 'a'}) }}{{ changefeed.feed_post_hook() }}", "spark"
        )
    assert dbt.render("{{ changefeed.feed_post_hook() }}", "spark") == ""


def test_publish_feed_needs_a_call_block(dbt: Any) -> None:
    with pytest.raises(DbtError, match="wraps the model's select"):
        dbt.render("{{ changefeed.publish_feed() }}", "spark")


# -- kill and re-run (subprocesses) -----------------------------------------------------


@pytest.fixture(scope="module")
def scenario(kill_scenario_run: dict[str, Any]) -> dict[str, Any]:
    return kill_scenario_run


@pytest.mark.slow
def test_publishing_run_killed_mid_write_exposes_nothing(scenario: dict[str, Any]) -> None:
    result = scenario["results"]["p1"]
    assert result.failure() is None, result.failure()
    assert result.returncode == -9 and result.killed, (result.killed, result.output)
    after = scenario["dumps"]["after_p1"][f"{KILL}.{PUBLISHED}"]
    assert {r[-1] for r in after["rows"]} == {1}, "the killed run's batch 2 is not visible"
    base1 = Counter(r for r in rows(scenario["dumps"]["base"], BASE, PUBLISHED) if r[-1] == 1)
    assert Counter(tuple(r) for r in after["rows"]) == base1


@pytest.mark.slow
def test_rerun_publishes_exactly_what_an_uninterrupted_run_publishes(
    scenario: dict[str, Any],
) -> None:
    final = scenario["results"]["final"]
    assert final.failure() is None, final.failure()
    for table in (PUBLISHED, PUB_CONSUMER):
        got = rows(scenario["dumps"]["final"], KILL, table)
        want = rows(scenario["dumps"]["base"], BASE, table)
        assert got == want, f"{table}: {sorted(got - want)} extra, {sorted(want - got)} missing"


@pytest.mark.slow
def test_published_feed_order_and_time(scenario: dict[str, Any]) -> None:
    data = scenario["dumps"]["base"][f"{BASE}.{PUBLISHED}"]
    cols = data["columns"]
    assert cols[:2] == ["shard_id", "ulid"] and cols[-1] == "changefeed_batch"
    events = [dict(zip(cols, r, strict=True)) for r in data["rows"]]
    assert len(events) == sum(len(w) for w in SHOP_WAVES.values()), "each source row once"
    for shard in {e["shard_id"] for e in events}:
        mine = sorted((e["changefeed_batch"], e["order_id"], bytes.fromhex(e["ulid"]))
                      for e in events if e["shard_id"] == shard)  # fmt: skip
        ulids = [u for _, _, u in mine]
        assert ulids == sorted(ulids) and len(set(ulids)) == len(ulids), f"shard {shard}"
        by_batch = {b: {u[:6] for bb, _, u in mine if bb == b} for b, _, _ in mine}
        assert by_batch[1] == {HINTS[1].to_bytes(6, "big")}
        # round 2's clock is behind round 1's: it stays in round 1's millisecond
        assert HINTS[2] < HINTS[1] and by_batch[2] == {HINTS[1].to_bytes(6, "big")}
    assert {e["shard_id"] for e in events} == {0, 1}, "shard = the model's region"


@pytest.mark.slow
def test_downstream_consumer_reads_the_published_feed(scenario: dict[str, Any]) -> None:
    pub = scenario["dumps"]["base"][f"{BASE}.{PUBLISHED}"]
    con = scenario["dumps"]["base"][f"{BASE}.{PUB_CONSUMER}"]
    ix = {c: pub["columns"].index(c) for c in ("shard_id", "ulid", "order_id", "changefeed_batch")}
    want = Counter((r[ix["shard_id"]], r[ix["ulid"]], r[ix["order_id"]], r[ix["changefeed_batch"]])
                   for r in pub["rows"])  # fmt: skip
    cx = {c: con["columns"].index(c) for c in ("shard_id", "ulid", "order_id", "changefeed_batch")}
    got = Counter((r[cx["shard_id"]], r[cx["ulid"]], r[cx["order_id"]], r[cx["changefeed_batch"]])
                  for r in con["rows"])  # fmt: skip
    assert got == want, "one consumer batch per publishing run, every event once"
