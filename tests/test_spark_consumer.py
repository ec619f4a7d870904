"""dbt-spark consumers of Spark feeds (docs/protocol.md 11.6; docs/spark.md).

* In-process (the shared ``spark`` session and ``dbt`` harness): the safe-point, cursor
  and events macros against real feed tables; argument and config validation; the
  Python writer's commit rule; the orphaned-location cleanup (11.5).
* Subprocess kill scenario (tests/support/spark_kill_scenario.py, a Derby Hive metastore): a
  consumer's first run (create table as select) and an incremental run, each killed
  with SIGKILL while Spark writes, then re-run; an unregistered partition directory
  where the next batch goes; a --full-refresh. The output must be identical to
  uninterrupted runs, row for row (ULIDs and batch numbers included).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError
from tests.support.spark_kill_scenario import (
    BASE,
    CONSUMER,
    KILL,
    PUB_CONSUMER,
    SHORT,
    landed_rows,
)
from tests.support.spark_kill_scenario import (
    dumped_rows as rows,
)

pytestmark = pytest.mark.spark

UNIT = "cf_unit_consumer"


def u(ms: int, n: int) -> bytes:
    return ms.to_bytes(6, "big") + b"\x00\x07" + n.to_bytes(8, "big")


def frame(spark: Any, rows: list[tuple[int, bytes, int, str]]) -> Any:
    return spark.createDataFrame(rows, "shard_id int, ulid binary, order_id bigint, status string")


def rel(table: str) -> str:
    return f"api.Relation.create(schema='{UNIT}', identifier='{table}')"


@pytest.fixture(scope="module")
def feed(spark: Any) -> str:
    """A feed of two batches on shards 0 and 1, written with sparkfeed.write_batch."""
    from changefeed.spark.feedtable import write_batch

    spark.sql(f"drop schema if exists {UNIT} cascade")
    table = f"{UNIT}.feed"
    first = [(0, u(10, 1), 1, "a"), (1, u(10, 2), 2, "b")]
    second = [(0, u(20, 1), 3, "c"), (0, u(20, 2), 4, "d")]
    assert write_batch(spark, table, frame(spark, first)) == 1
    assert write_batch(spark, table, frame(spark, second)) == 2
    assert write_batch(spark, table, frame(spark, [])) == 0, "an empty batch writes nothing"
    return table


def test_write_batch_commits_one_partition_per_batch(spark: Any, feed: str) -> None:
    from changefeed.spark.feedtable import feed_heads, next_batch

    assert [r[0] for r in spark.sql(f"show partitions {feed}").collect()] == [
        "changefeed_batch=1",
        "changefeed_batch=2",
    ]
    assert feed_heads(spark, feed) == {0: u(20, 2), 1: u(10, 2)}
    assert next_batch(spark, feed) == 3
    columns = ["shard_id", "ulid", "order_id", "status", "changefeed_batch"]
    assert spark.table(feed).columns == columns


def test_a_feed_table_by_name_answers_what_the_functions_do(spark: Any, feed: str) -> None:
    """FeedTable.for_name: one object per feed table; the module's functions are its
    answers, whichever way the name is spelled."""
    from changefeed.spark.feedtable import (
        FeedTable,
        FeedTableNameError,
        committed_batches,
        feed_heads,
        next_batch,
    )

    database, table = feed.split(".")
    spellings = (feed, f"`{database}`.`{table}`", f"spark_catalog.{feed}", table)
    spark.sql(f"use {database}")
    try:
        for name in spellings:
            found = FeedTable.for_name(spark, name)
            assert found.name.text == feed and found.name.sql == f"`{database}`.`{table}`"
            assert found.exists() and found.format() == "parquet"
            assert found.committed_batches() == committed_batches(spark, feed) == [1, 2]
            assert found.batch_range() == (1, 2)
            assert found.heads() == feed_heads(spark, feed) == {0: u(20, 2), 1: u(10, 2)}
            assert found.heads([1]) == {0: u(20, 2), 1: u(10, 2)}, "shard 1 is in batch 1"
            assert found.next_batch() == next_batch(spark, feed) == 3
            assert str(found.location()).endswith(f"/{table}")
    finally:
        spark.sql("use default")
    missing = FeedTable.for_name(spark, f"{database}.no_such_feed")
    assert (missing.exists(), missing.heads(), missing.next_batch()) == (False, {}, 1)
    for bad in ("", "a.b.c.d", "a..b", "`a.b"):
        with pytest.raises(FeedTableNameError, match="a feed table is named"):
            FeedTable.for_name(spark, bad)


def test_write_batch_refuses_to_go_backwards(spark: Any, feed: str) -> None:
    from changefeed.spark.feedtable import FeedOrderError, write_batch

    with pytest.raises(FeedOrderError, match=r"shard 1: event \w+ is not above the head"):
        write_batch(spark, feed, frame(spark, [(1, u(10, 2), 9, "dup")]))
    with pytest.raises(ValueError, match="events may not carry changefeed_batch"):
        write_batch(spark, feed, spark.table(feed))
    with pytest.raises(ValueError, match="16-byte ulid"):
        write_batch(spark, feed, frame(spark, [(1, b"\xff" * 15, 9, "short")]))


def test_safe_point_is_the_newest_batch_as_a_literal(spark: Any, dbt: Any, feed: str) -> None:
    sql = dbt.render("{{ changefeed.feed_safe_point(" + rel("feed") + ", 'e') }}", "spark")
    assert sql == "(e.changefeed_batch <= 2)", "every shard up to its head (F3)"
    got = spark.sql(f"select order_id from {feed} as e where {sql}").collect()
    assert sorted(r[0] for r in got) == [1, 2, 3, 4]


def test_safe_point_of_an_empty_feed_reads_nothing(spark: Any, dbt: Any) -> None:
    spark.sql(f"create table {UNIT}.empty (shard_id int, ulid binary, changefeed_batch bigint) "
              "using parquet partitioned by (changefeed_batch)")  # fmt: skip
    sql = dbt.render("{{ changefeed.feed_safe_point(" + rel("empty") + ", 'x') }}", "spark")
    assert sql == "false"


@pytest.mark.parametrize("schema", [UNIT, "cf_no_such_schema"])
def test_a_missing_feed_names_the_catalog_to_use(
    dbt: Any, feed: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed the session's catalog does not have fails in one line naming the fix: in a
    session with a catalog of its own (a new terminal without SPARK_CONF_DIR), the shared
    catalog's SPARK_CONF_DIR (issue 33). The other case, a shared metastore without the
    feed, is not tested: this session's catalog is its own by construction."""
    missing = f"api.Relation.create(schema='{schema}', identifier='not_landed')"
    macros = (f"changefeed.feed_safe_point({missing}, 'e')", f"changefeed.feed_events({missing})")
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    for macro in macros:
        with pytest.raises(DbtError) as unset:
            dbt.render("{{ " + macro + " }}", "spark")
        assert (
            f"the feed {schema}.not_landed is not in this Spark session's catalog, which is one"
            " of its own (an embedded Derby metastore, metastore_db/ in the directory it started"
            " in: delete it), not the shared one the landing writes to; SPARK_CONF_DIR is not"
            " set: set it to the shared catalog's conf directory"
        ) in str(unset.value), macro
    monkeypatch.setenv("SPARK_CONF_DIR", "/srv/catalog/conf")
    with pytest.raises(DbtError) as configured:
        dbt.render("{{ " + macros[0] + " }}", "spark")
    expected = "SPARK_CONF_DIR=/srv/catalog/conf configures no shared metastore"
    assert expected in str(configured.value)
    # an existing feed passes the check
    sql = dbt.render("{{ changefeed.feed_safe_point(" + rel("feed") + ", 'e') }}", "spark")
    assert sql == "(e.changefeed_batch <= 2)"


def output_table(spark: Any, name: str, rows: str) -> str:
    """A consumer output: (shard_id, ulid, changefeed_feed_batch, changefeed_batch) ``rows``."""
    spark.sql(f"drop table if exists {UNIT}.{name}")
    spark.sql(
        f"create table {UNIT}.{name} (shard_id int, ulid binary, changefeed_feed_batch bigint, "
        "changefeed_batch bigint) using parquet partitioned by (changefeed_batch)"
    )
    if rows:
        spark.sql(f"insert into {UNIT}.{name} values {rows}")
    return rel(name)


def test_cursor_is_the_feed_batch_the_output_consumed(spark: Any, dbt: Any, feed: str) -> None:
    # the consumer's newest run (its batch 2) consumed the feed up to its batch 1
    output = output_table(spark, "output", f"(0, X'{u(10, 1).hex()}', 1, 2), (9, X'00', 0, 1)")
    empty = output_table(spark, "output_empty", "")
    sql, from_start = dbt.render_many(
        ["{{ changefeed.feed_cursor('e', " + output + ") }}",
         "{{ changefeed.feed_cursor('e', " + empty + ") }}"], "spark")  # fmt: skip
    assert (sql, from_start) == ("(e.changefeed_batch > 1)", "(e.changefeed_batch > 0)")
    got = spark.sql(f"select order_id from {feed} as e where {sql}").collect()
    assert sorted(r[0] for r in got) == [3, 4]


def test_feed_events_is_safe_point_and_cursor(spark: Any, dbt: Any, feed: str) -> None:
    output = output_table(spark, "output2", f"(0, X'{u(10, 1).hex()}', 1, 1)")
    sql = dbt.render(
        "select * from {{ changefeed.feed_events(" + rel("feed") + ", " + output + ") }} as e",
        "spark",
    )
    result = spark.sql(sql)
    columns = ["shard_id", "ulid", "order_id", "status", "changefeed_feed_batch"]
    assert result.columns == columns, "the feed's changefeed_batch, renamed"
    assert sorted(r["order_id"] for r in result.collect()) == [3, 4]
    whole = dbt.render(
        "select * from {{ changefeed.feed_events(" + rel("feed") + ") }} as e", "spark"
    )
    assert sorted(r["order_id"] for r in spark.sql(whole).collect()) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ("changefeed.feed_safe_point(" + rel("feed") + ", 'e.x')", "alias must be the table alias"),
        ("changefeed.feed_safe_point(" + rel("feed") + ", none)", "alias must be the table alias"),
        ("changefeed.feed_safe_point('cf.feed', 'e')", "feed must be a relation such as ref"),
        ("changefeed.feed_events(none)", "feed must be a relation"),
        ("changefeed.feed_cursor('e', 'cf.out')", "output must be a relation"),
        ("changefeed.feed_batch()", "needs materialized='incremental'"),
    ],
)
def test_arguments_and_config_are_validated(dbt: Any, snippet: str, message: str) -> None:
    with pytest.raises(DbtError, match=message):
        dbt.render("{{ " + snippet + " }}", "spark")


def test_consumer_config_accepted_for_parquet_and_delta(dbt: Any) -> None:
    parquet = dbt.render(
        "{{ config(materialized='incremental', incremental_strategy='insert_overwrite', "
        "partition_by=['changefeed_batch']) }}{{ changefeed.feed_batch() }}",
        "spark",
    )
    assert parquet == "cast(1 as bigint)", "not incremental (the inline node has no table): 1"
    delta = dbt.render(
        "{{ config(materialized='incremental', file_format='delta', incremental_strategy='merge', "
        "unique_key=['shard_id', 'ulid']) }}{{ changefeed.feed_batch() }}",
        "spark",
    )
    assert delta == "cast(1 as bigint)"


def test_orphaned_location_is_cleared(spark: Any, feed: str) -> None:
    """11.5: debris where a table's managed location would be blocks creating it; the
    cleanup deletes it through a throw-away managed table."""
    from changefeed.spark.feedtable import clear_orphan_location, write_batch

    location = next(
        str(r[1]) for r in spark.sql(f"describe schema extended {UNIT}").collect()
        if str(r[0]).lower() == "location"
    )  # fmt: skip
    debris = Path(location.removeprefix("file:")) / "orphan"
    (debris / "_temporary" / "0").mkdir(parents=True)
    (debris / "_temporary" / "0" / "part-00000.parquet").write_bytes(b"partial")
    with pytest.raises(Exception, match="LOCATION_ALREADY_EXISTS"):
        spark.sql(f"create table {UNIT}.orphan (a int) using parquet")
    clear_orphan_location(spark, f"{UNIT}.orphan")
    assert not debris.exists()
    assert write_batch(spark, f"{UNIT}.orphan", frame(spark, [(0, u(1, 1), 1, "x")])) == 1
    clear_orphan_location(spark, f"{UNIT}.orphan")  # an existing table is left alone
    assert spark.table(f"{UNIT}.orphan").count() == 1


def test_table_exists_answers_from_the_catalog(spark: Any, feed: str) -> None:
    """True for a table, False for a missing table or schema (both listed without it, in
    Spark's catalog and Iceberg's), backticked parts, and a refusal of a name that is not
    one."""
    from changefeed.spark.feedtable import table_exists

    assert table_exists(spark, feed)
    assert table_exists(spark, ".".join(f"`{p}`" for p in feed.split(".")))
    assert not table_exists(spark, f"{UNIT}.no_such_table")
    assert not table_exists(spark, "no_such_schema.no_such_table")
    # Iceberg's Hadoop catalog raises its own exception for a missing namespace, and for
    # the listing of its root before its warehouse exists
    assert not table_exists(spark, "iceberg.no_such_namespace.no_such_table")
    for bad in ("", "a..b", "`a.b", "a."):
        with pytest.raises(ValueError, match="not a table name"):
            table_exists(spark, bad)


class _CreatedMeanwhile:
    """The session, with another writer creating ``schema`` (and with ``table``, that
    table) right after the first listing of the schema's tables has found it missing."""

    def __init__(self, spark: Any, schema: str, table: str | None) -> None:
        self._spark, self._schema, self._table, self.created = spark, schema, table, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)

    def sql(self, query: str) -> Any:
        if self.created or not query.startswith(f"show tables in `{self._schema}`"):
            return self._spark.sql(query)
        try:
            return self._spark.sql(query)
        finally:
            self.created = True
            self._spark.sql(f"create schema {self._schema}")
            if self._table:
                self._spark.sql(f"create table {self._schema}.{self._table} (a int) using parquet")


def test_table_exists_in_a_schema_created_meanwhile(spark: Any) -> None:
    """A schema created between the listing of its tables (missing) and the listing of
    the catalog (there), as by the landing service's first batches of several feeds into
    one new schema: its tables are listed once more, which answers (before, this raised
    CatalogUnavailable and failed the run)."""
    from changefeed.spark.feedtable import table_exists

    for table in (None, "t"):
        schema = f"cf_meanwhile_{uuid.uuid4().hex[:8]}"
        racing = _CreatedMeanwhile(spark, schema, table)
        try:
            assert table_exists(racing, f"{schema}.t") is (table is not None)
            assert racing.created, "the interleaving happened"
        finally:
            spark.sql(f"drop schema if exists {schema} cascade")


def test_macros_name_the_supported_adapters_elsewhere(dbt: Any) -> None:
    snippets = [
        "{{ changefeed.feed_safe_point(this, 'e') }}",
        "{{ changefeed.feed_cursor('e') }}",
        "{{ changefeed.feed_events(this) }}",
        "{{ changefeed.feed_batch() }}",
        "{% call changefeed.publish_feed() %}select 1 as a{% endcall %}",
    ]
    for snippet in snippets:
        with pytest.raises(DbtError, match="supported adapters: spark"):
            dbt.render(snippet, "postgres")


# -- kill and re-run (subprocesses) -----------------------------------------------------


@pytest.fixture(scope="module")
def scenario(kill_scenario_run: dict[str, Any]) -> dict[str, Any]:
    return kill_scenario_run


def expected_consumer(batches: tuple[int, ...], keep: Any = None) -> Counter[tuple[Any, ...]]:
    """What CONSUMER (status upper-cased) should hold: every landed event once, with its
    feed batch, in the consumer batch = the round that landed it (= the feed batch)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for n in batches:
        for shard, ulid, order_id, status in landed_rows(n):
            if keep is None or keep(status):
                shown = status.upper() if keep is None else status
                out[(shard, ulid.upper(), order_id, shown, n, n)] += 1
    return out


@pytest.mark.slow
def test_uninterrupted_consumers_read_every_event_once(scenario: dict[str, Any]) -> None:
    base = scenario["dumps"]["base"]
    assert rows(base, BASE, CONSUMER) == expected_consumer((1, 2))
    assert rows(base, BASE, SHORT) == expected_consumer((1, 2), keep=lambda s: s != "cancelled")


@pytest.mark.slow
def test_first_run_killed_mid_write_then_rerun(scenario: dict[str, Any]) -> None:
    result = scenario["results"]["k1"]
    assert result.failure() is None, result.failure()
    assert result.returncode == -9, result.output
    assert result.killed and "uncommitted output file" in result.killed, result.killed
    after = scenario["dumps"]["after_k1"]
    assert after[f"{KILL}.{CONSUMER}"] is None, "the killed first run created no table"
    final = scenario["dumps"]["final"]
    assert rows(final, KILL, CONSUMER) == rows(scenario["dumps"]["base"], BASE, CONSUMER)


@pytest.mark.slow
def test_incremental_run_killed_mid_write_then_rerun(scenario: dict[str, Any]) -> None:
    result = scenario["results"]["k2"]
    assert result.failure() is None, result.failure()
    assert result.returncode == -9 and result.killed and "uncommitted output file" in result.killed
    assert "changefeed_batch=2" in result.killed, "killed while writing the run's batch"
    after = rows(scenario["dumps"]["after_k2"], KILL, CONSUMER)
    assert after == expected_consumer((1,)), "nothing of the killed run is visible"
    table = scenario["workdir"] / "warehouse" / f"{KILL}.db" / CONSUMER
    staging = list(table.glob(".spark-staging-*"))
    assert staging, "the kill left the job's staging directory behind (harmless debris)"
    final = scenario["results"]["final"]
    assert final.failure() is None, final.failure()
    assert rows(scenario["dumps"]["final"], KILL, CONSUMER) == expected_consumer((1, 2))


@pytest.mark.slow
def test_unregistered_partition_directory_is_invisible_and_replaced(
    scenario: dict[str, Any],
) -> None:
    assert scenario["orphan"].name == "changefeed_batch=2"
    after = scenario["dumps"]["after_k2"][f"{KILL}.{PUB_CONSUMER}"]
    assert {r[-1] for r in after["rows"]} == {1}, "the orphaned directory was not read"
    final = rows(scenario["dumps"]["final"], KILL, PUB_CONSUMER)
    assert final == rows(scenario["dumps"]["base"], BASE, PUB_CONSUMER)
    assert len(final) == sum(final.values()), "no duplicates"


@pytest.mark.slow
def test_full_refresh_rebuilds_from_the_start(scenario: dict[str, Any]) -> None:
    before = rows(scenario["dumps"]["health"], BASE, CONSUMER)
    assert {r[-1] for r in before} == {1, 2, 3}
    rebuilt = rows(scenario["dumps"]["base_full_refresh"], BASE, CONSUMER)
    assert {r[-1] for r in rebuilt} == {1}, "one batch: everything up to the safe point"
    assert Counter(r[:-1] for r in rebuilt.elements()) == Counter(r[:-1] for r in before.elements())


@pytest.mark.slow
def test_compiled_sql_shows_the_window(scenario: dict[str, Any]) -> None:
    target = scenario["workdir"] / f"target-{KILL}"
    model = Path("changefeed_integration_tests", "models", "spark", f"{CONSUMER}.sql")
    sql = (target / "compiled" / model).read_text()
    flat = " ".join(sql.split())
    assert "(e.changefeed_batch <= 2)" in flat, "the safe point: the feed's newest batch"
    assert "(e.changefeed_batch > 1)" in flat, "the cursor: the feed batch consumed so far"
    assert "cast(2 as bigint) as changefeed_batch" in flat, "the run's batch, a literal"
    statement = (target / "run" / model).read_text()
    assert "insert overwrite table cf_kill.cf_orders_consumer" in statement


@pytest.mark.slow
def test_dbt_unit_test_overrides_the_cursor_and_safe_point(scenario: dict[str, Any]) -> None:
    """integration_tests/models/spark/cf_spark_unit_tests.yml, run in the baseline."""
    steps = scenario["results"]["base"].steps
    unit = [s for s in steps if s.get("name") == "unit tests"]
    assert unit and unit[0].get("error") is None and "failed" not in unit[0], steps
