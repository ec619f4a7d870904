"""Publishing models and consumers on Delta Lake and Iceberg, run for real (docs/spark.md).

The shared ``spark`` session has both formats when ``make jars`` has fetched their jars
(changefeed.local.jars). Per format, one scratch dbt project holds a publishing model and two
consumers of it, merging on ``(shard_id, ulid)`` and appending; two rounds of source
changes, a re-run with nothing new and a ``--full-refresh`` must give every event exactly
once, with the parquet path's batch numbering.

Delta tables live in Spark's own catalog (``spark_catalog`` is Delta's), iceberg tables in
the Iceberg catalog, which the iceberg runs make the session's current catalog: dbt-spark
has no catalog level and lists a schema's relations without their catalog, so with
``iceberg.<schema>`` it would never find its own tables and rebuild them on every run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError, DbtHarness, package_project
from tests.support.dbt_spark import SCHEMA_MACRO, current_catalog, require_lakehouse

pytestmark = pytest.mark.spark

SOURCE = "cf_lake_src"

SHOP = {
    1: [(1, "new", 0), (2, "new", 1), (3, "new", 1), (4, "new", 0)],
    2: [(1, "shipped", 0), (5, "new", 1), (6, "new", 0)],
}


PUBLISHED = """{{{{ config(materialized='incremental', file_format='{fmt}', schema='{schema}',
    incremental_strategy='merge', unique_key=['shard_id', 'ulid'],
    changefeed={{'key': ['order_id'], 'shard': 'region',
                 'time_hint': env_var('CF_TEST_TIME_HINT_MS')}}) }}}}
{{% call changefeed.publish_feed() %}}
select o.order_id, o.status, o.wave, o.region from spark_catalog.{SOURCE}.shop_orders as o
{{% if is_incremental() %}}
where o.wave > coalesce((select max(wave) from {{{{ this }}}}), 0)
{{% endif %}}
{{% endcall %}}
"""

CONSUMER = """{{{{ config(materialized='incremental', file_format='{fmt}', schema='{schema}',
    {strategy}) }}}}
select e.shard_id, e.ulid, e.order_id, e.status, e.changefeed_batch as changefeed_feed_batch,
    {{{{ changefeed.feed_batch() }}}} as changefeed_batch
from {{{{ ref('lake_published') }}}} as e
where {{{{ changefeed.feed_safe_point(ref('lake_published'), 'e') }}}}
{{% if is_incremental() %}} and {{{{ changefeed.feed_cursor('e') }}}} {{% endif %}}
"""

STRATEGIES = {
    "lake_merged": "incremental_strategy='merge', unique_key=['shard_id', 'ulid']",
    "lake_appended": "incremental_strategy='append'",
}
MODELS = ("lake_published", *STRATEGIES)


def schema_of(fmt: str) -> str:
    return f"cf_lake_{fmt}"


@pytest.fixture(scope="module")
def lakehouse(spark: Any) -> Any:
    """The shared session, with Delta and Iceberg (unavailable without their jars)."""
    require_lakehouse(spark)
    spark.sql(f"create database if not exists {SOURCE}")
    spark.sql(f"drop table if exists {SOURCE}.shop_orders")
    spark.sql(f"create table {SOURCE}.shop_orders (order_id bigint, status string, wave int, "
              "region int) using parquet")  # fmt: skip
    return spark


def project(fmt: str, root: Any) -> DbtHarness:
    schema = schema_of(fmt)
    models = {"lake_published.sql": PUBLISHED.format(fmt=fmt, schema=schema, SOURCE=SOURCE)}
    for name, strategy in STRATEGIES.items():
        models[f"{name}.sql"] = CONSUMER.format(fmt=fmt, schema=schema, strategy=strategy)
    path = package_project(root / "project", f"changefeed_lake_{fmt}", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


def run(harness: DbtHarness, hint: int, *args: str) -> None:
    import os

    os.environ["CF_TEST_TIME_HINT_MS"] = str(hint)
    result = harness.invoke(["run", *args], "spark")
    if not result.success:
        results = getattr(result.result, "results", None) or []
        messages = [str(getattr(r, "message", r)) for r in results]
        raise DbtError(str(result.exception or "") + " ".join(messages))


def rows(spark: Any, fmt: str, table: str, columns: str) -> Counter[tuple[Any, ...]]:
    frame = spark.sql(f"select {columns} from {schema_of(fmt)}.{table}")
    return Counter(tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
                   for r in frame.collect())  # fmt: skip


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def rounds(
    request: pytest.FixtureRequest, lakehouse: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Per format: two rounds of source changes, each run once; then a run with nothing
    new. Returns the tables after each step."""
    fmt = request.param
    spark = lakehouse
    spark.sql(f"truncate table spark_catalog.{SOURCE}.shop_orders")
    with current_catalog(spark, fmt):
        yield from two_rounds(spark, fmt, tmp_path_factory)


def two_rounds(
    spark: Any, fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    spark.sql(f"drop schema if exists {schema_of(fmt)} cascade")
    # dbt lists the catalog's namespaces first; a hadoop catalog without any has no
    # warehouse directory yet, and listing it fails
    spark.sql(f"create schema {schema_of(fmt)}")
    root = tmp_path_factory.mktemp(f"lake-{fmt}")
    harness = DbtHarness(root / "dbt", spark=lambda: spark, project_dir=project(fmt, root))
    seen: dict[str, Any] = {"fmt": fmt, "harness": harness}
    for wave, hint in ((1, 1_700_000_000_000), (2, 1_699_999_000_000)):
        values = ", ".join(f"({o}, '{s}', {wave}, {r})" for o, s, r in SHOP[wave])
        spark.sql(f"insert into spark_catalog.{SOURCE}.shop_orders values {values}")
        run(harness, hint, "--select", *MODELS)
        seen[wave] = snapshot(spark, fmt)
    run(harness, 1_700_000_100_000, "--select", *MODELS)
    seen["again"] = snapshot(spark, fmt)
    yield seen


def snapshot(spark: Any, fmt: str) -> dict[str, Counter[tuple[Any, ...]]]:
    event = "shard_id, ulid, order_id, status"
    out = {"lake_published": rows(spark, fmt, "lake_published", f"{event}, changefeed_batch")}
    for name in STRATEGIES:
        out[name] = rows(spark, fmt, name, f"{event}, changefeed_feed_batch, changefeed_batch")
    return out


def test_published_feed_gets_one_batch_per_run(rounds: dict[str, Any]) -> None:
    first, second = rounds[1]["lake_published"], rounds[2]["lake_published"]
    assert sorted((r[2], r[3], r[4]) for r in first) == [
        (1, "new", 1), (2, "new", 1), (3, "new", 1), (4, "new", 1)]  # fmt: skip
    assert sorted((r[2], r[3], r[4]) for r in second - first) == [
        (1, "shipped", 2), (5, "new", 2), (6, "new", 2)]  # fmt: skip
    assert first <= second, "a run only adds rows"
    assert max(second.values()) == 1, "each event once"
    for shard in (0, 1):
        ulids = sorted((r[4], r[1]) for r in second if r[0] == shard)
        assert [u for _, u in ulids] == sorted(u for _, u in ulids), "F3: batches move forward"
    assert rounds["again"]["lake_published"] == second, "nothing new: no batch"


@pytest.mark.parametrize("consumer", list(STRATEGIES))
def test_consumers_get_every_event_exactly_once(rounds: dict[str, Any], consumer: str) -> None:
    for step in (1, 2, "again"):
        feed = rounds[step]["lake_published"]
        out = rounds[step][consumer]
        assert Counter(r[:4] for r in out) == Counter(r[:4] for r in feed), step
        assert all(r[4] == f[4] for r in out for f in feed if f[:2] == r[:2]), "feed batch kept"
    final = rounds["again"][consumer]
    assert sorted({(r[4], r[5]) for r in final}) == [(1, 1), (2, 2)], "one output batch per run"


def test_full_refresh_rebuilds_the_consumers(rounds: dict[str, Any], lakehouse: Any) -> None:
    fmt, harness = rounds["fmt"], rounds["harness"]
    run(harness, 1_700_000_200_000, "--full-refresh", "--select", *STRATEGIES)
    rebuilt = snapshot(lakehouse, fmt)
    feed = rounds["again"]["lake_published"]
    assert rebuilt["lake_published"] == feed
    for consumer in STRATEGIES:
        assert Counter(r[:4] for r in rebuilt[consumer]) == Counter(r[:4] for r in feed)
        assert {(r[4], r[5]) for r in rebuilt[consumer]} == {(1, 1), (2, 1)}, "one batch"
