"""``changefeed verify`` and ``changefeed.spark.verify.verify`` on the real PostgreSQL and
Spark (docs/spark.md "Verifying a state model"; protocol section 13).

One ``capture: trigger`` feed with payloads, landed once and consumed by three current-state
models, on parquet (the payload struct), Delta (``deletes='remove'``: a view of top-level
columns, one cast to another type, one left out) and Iceberg (the payload struct), and a
history on parquet (its open versions are compared). The tests run in file order on the
module's one pipeline:

1. every model equals the source;
2. copies of each current state, with one key changed, one removed, one added and one
   held twice, are found with exactly those four differences, by the Python API and by
   the command (exit code 4); what cannot be compared is refused, naming the cause;
3. then writes after the models' run (an update, an insert, a delete): in flight, not
   differences, while in the database's feed (parquet models) and once landed (Delta,
   Iceberg), and a real difference beside them is still found.
"""

from __future__ import annotations

import shlex
from decimal import Decimal
from typing import Any

import pytest
from tests.support.dbt_harness import package_project
from tests.support.dbt_spark import SCHEMA_MACRO, current_catalog, fresh_projects, run_all
from tests.support.doc_blocks import sample
from tests.support.pg_feeds import create_table, setup_feed, teardown_feed

from changefeed.cli import EXIT_DIFFERENT, main
from changefeed.spark.landing import land
from changefeed.spark.verify import VerifyError, verify

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

SOURCE, TABLE = "cf_verify_src", "orders"
FEED = f"{SOURCE}.{TABLE}"
LANDED = "cf_verify_land"
LANDED_TABLE = f"{LANDED}.{TABLE}"
COLUMNS = "id bigint primary key, status text not null, amount numeric(10,2), note text"
FORMATS = ("parquet", "delta", "iceberg")
PROJECTS = {"parquet": ("parquet", "delta"), "iceberg": ("iceberg",)}

PAYLOAD = "e.payload"
#: The Delta model's own columns: top level, amount as text, note left out; a delete is
#: an event without a payload.
FLAT = (
    "e.payload.status as status, cast(e.payload.amount as string) as amount, "
    "e.payload is null as gone"
)
#: model -> (format, config, the select's columns after the key)
MODELS = {
    "state_parquet": ("parquet", "materialized='changefeed_current_state'", PAYLOAD),
    "state_delta": (
        "delta",
        "materialized='changefeed_current_state', deletes='remove', delete_when='gone'",
        FLAT,
    ),
    "state_iceberg": ("iceberg", "materialized='changefeed_current_state'", PAYLOAD),
    "history_parquet": ("parquet", "materialized='changefeed_history'", PAYLOAD),
}
STATES = ("state_parquet", "state_delta", "state_iceberg")
MODELS_IN_FEED = ("state_parquet", "history_parquet")
MODELS_LANDED = ("state_delta", "state_iceberg")

MODEL_SQL = """{{{{ config({config}, unique_key='id', file_format='{fmt}',
    schema='{schema}', alias='{name}', buckets=2) }}}}
select e.shard_id, e.ulid, e.id, {columns}, e.changefeed_feed_batch
from {{{{ changefeed.feed_events(api.Relation.create(schema='spark_catalog.{landed}',
    identifier='{table}'), this) }}}} as e
"""


def schema_of(fmt: str) -> str:
    return f"cf_verify_{fmt}"


def name_of(model: str) -> str:
    """The model's table as Spark names it from its own catalog."""
    fmt = MODELS[model][0]
    prefix = "iceberg." if fmt == "iceberg" else ""
    return f"{prefix}{schema_of(fmt)}.{model}"


def project(catalog: str, root: Any) -> Any:
    models = {
        f"{name}.sql": MODEL_SQL.format(config=config, fmt=fmt, schema=schema_of(fmt), name=name,
                                        columns=columns, landed=LANDED, table=TABLE)
        for name, (fmt, config, columns) in MODELS.items()
        if fmt in PROJECTS[catalog]
    }  # fmt: skip
    path = package_project(root / f"project-{catalog}", f"changefeed_verify_{catalog}", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    return path


def options(pg_uri: str) -> dict[str, str]:
    return {"connection": pg_uri, "feed": FEED}


@pytest.fixture(scope="module")
def pipeline(
    spark: Any, dbt: Any, pg_uri: str, admin: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Twelve orders written, updated and one deleted; landed; every model run once."""
    harnesses = fresh_projects(
        spark, LANDED, {fmt: schema_of(fmt) for fmt in FORMATS},
        tmp_path_factory.mktemp("verify"), project, PROJECTS,
    )  # fmt: skip
    create_table(admin, SOURCE, TABLE, COLUMNS)
    teardown_feed(dbt, SOURCE, TABLE)
    setup_feed(dbt, SOURCE, TABLE, "outbox", capture="trigger")
    for i in range(1, 13):
        admin.execute(
            f"insert into {FEED} values (%s, 'new', %s, %s)",
            (i, Decimal(i) * Decimal("1.25"), None if i % 2 else f"note {i}"),
        )
    admin.execute(f"update {FEED} set status = 'paid' where id <= 3")
    admin.execute(f"delete from {FEED} where id = 12")
    assert land(spark, {**options(pg_uri), "payload": "true"}, LANDED_TABLE).batch == 1
    run_all(spark, harnesses)
    return {"harnesses": harnesses}


@pytest.mark.parametrize("model", list(MODELS))
def test_every_model_equals_the_source(
    spark: Any, pg_uri: str, pipeline: dict[str, Any], model: str
) -> None:
    result = verify(spark, options(pg_uri), name_of(model), LANDED_TABLE)
    assert result.ok, result.lines()
    assert (result.source_rows, result.model_rows, result.equal) == (11, 11, 11)
    assert result.in_flight == 0 and result.model_batch == 1
    assert result.keys == ("id",)
    if model == "state_delta":
        assert result.columns == ("status", "amount") and result.not_compared == ("note",)
    else:
        assert result.columns == ("status", "amount", "note") and result.not_compared == ()
    assert result.lines()[-1] == "11 equal; no difference"


def tampered(spark: Any, model: str) -> str:
    """A copy of ``model`` (and of its cursor) in which key 3's status is changed, key 4
    is missing, key 999 is added and key 5 is held twice."""
    from pyspark.sql import functions as F

    fmt = MODELS[model][0]
    copy = f"{name_of(model)}_tampered"
    rows = spark.table(name_of(model))
    if "payload" in rows.columns:
        status = F.col("payload").withField(
            "status", F.when(F.col("id") == 3, F.lit("shipped")).otherwise(F.col("payload.status"))
        )
        changed = rows.withColumn("payload", status)
    else:
        changed = rows.withColumn(
            "status", F.when(F.col("id") == 3, F.lit("shipped")).otherwise(F.col("status"))
        )
    rows = (
        changed.where(F.col("id") != 4)
        .unionByName(rows.where(F.col("id") == 5))
        .unionByName(rows.where(F.col("id") == 6).withColumn("id", F.lit(999).cast("bigint")))
    )
    with current_catalog(spark, fmt):
        for name in (copy, f"{copy}__changefeed_cursor"):
            spark.sql(f"drop table if exists {name}")
    rows.writeTo(copy).using(fmt).create()
    spark.table(f"{name_of(model)}__changefeed_cursor").writeTo(
        f"{copy}__changefeed_cursor"
    ).using(fmt).create()
    return copy


@pytest.mark.parametrize("model", STATES)
def test_a_changed_a_missing_an_extra_and_a_duplicate_key_are_found(
    spark: Any, pg_uri: str, pipeline: dict[str, Any], model: str
) -> None:
    copy = tampered(spark, model)
    result = verify(spark, options(pg_uri), copy, LANDED_TABLE)
    assert not result.ok
    assert dict(result.counts) == {"changed": 1, "missing": 1, "extra": 1, "duplicate": 1}
    assert (result.equal, result.in_flight, result.source_rows, result.model_rows) == (8, 0, 11, 12)
    found = [(d.kind, d.key["id"]) for d in result.differences]
    assert found == [("changed", 3), ("missing", 4), ("duplicate", 5), ("extra", 999)]
    changed = result.differences[0]
    assert changed.source is not None and changed.model is not None
    assert (changed.source["status"], changed.model["status"]) == ("paid", "shipped")
    lines = result.lines()
    assert "changed id=3: status 'paid' in the source, 'shipped' in the model" in lines
    assert "missing id=4: in the source, not in the model" in lines
    assert "duplicate id=5: 2 rows in the model" in lines
    assert "extra id=999: in the model, not in the source" in lines
    assert "8 equal; 4 different (1 changed, 1 missing, 1 extra, 1 duplicate)" in lines
    if model == "state_parquet":  # max_keys bounds the list, not the counts
        short = verify(spark, options(pg_uri), copy, LANDED_TABLE, max_keys=1)
        assert len(short.differences) == 1 and short.different == 4
        assert short.lines()[-1] == "... 3 more"


def documented(pg_uri: str, model: str) -> dict[str, str]:
    """The docs' names -> this test's."""
    return {"$CHANGEFEED_CONNECTION": pg_uri, "shop.orders": FEED,
            "landing.orders_feed": LANDED_TABLE, "analytics.orders_state": model}  # fmt: skip


def test_the_documented_command_exits_4_on_a_difference_and_0_on_equality(
    spark: Any, pg_uri: str, pipeline: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/spark.md's command, in this process on the test's own session (--spark
    existing), prints the documented report for the tampered parquet copy."""
    copy = f"{name_of('state_parquet')}_tampered"
    names = documented(pg_uri, copy)
    words = shlex.split(sample("spark-verify").replace("\\\n", " "))
    assert words[:2] == ["changefeed", "verify"]
    args = [names.get(w, w) for w in words[1:]] + ["--spark", "existing"]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == EXIT_DIFFERENT, err
    report = out
    for doc_name, name in names.items():
        report = report.replace(name, doc_name)
    assert report.splitlines() == sample("spark-verify-output").splitlines()
    equal = documented(pg_uri, name_of("state_parquet"))
    assert main([equal.get(w, w) for w in words[1:]] + ["--spark", "existing"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[-1] == "11 equal; no difference"


def test_the_documented_python_call(spark: Any, pg_uri: str, pipeline: dict[str, Any]) -> None:
    code = sample("python-api-verify")
    for doc_name, name in documented(pg_uri, name_of("state_iceberg")).items():
        code = code.replace(doc_name, name)
    exec(compile(code, "python-api-verify", "exec"), {"spark": spark, "uri": pg_uri})
    code = sample("python-api-verify").replace(
        "analytics.orders_state", f"{name_of('state_iceberg')}_tampered"
    )
    for doc_name, name in documented(pg_uri, "").items():
        code = code.replace(doc_name, name)
    with pytest.raises(SystemExit) as exited:
        exec(compile(code, "python-api-verify", "exec"), {"spark": spark, "uri": pg_uri})
    assert exited.value.code == 4


def test_what_cannot_be_compared_is_refused_naming_the_cause(
    spark: Any, pg_uri: str, pipeline: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(VerifyError, match=r"is not a changefeed_current_state or "
                       r"changefeed_history model \(or it has never run"):  # fmt: skip
        verify(spark, options(pg_uri), LANDED_TABLE, LANDED_TABLE)
    with pytest.raises(VerifyError, match=r"model cf_verify_parquet\.nothing does not exist"):
        verify(spark, options(pg_uri), "cf_verify_parquet.nothing", LANDED_TABLE)
    with pytest.raises(VerifyError, match=r"landed table cf_verify_land\.nothing does not exist"):
        verify(spark, options(pg_uri), name_of("state_parquet"), "cf_verify_land.nothing")
    keyless = "cf_verify_parquet.keyless"
    spark.sql(f"drop table if exists {keyless}")
    spark.sql(f"drop table if exists {keyless}__changefeed_cursor")
    spark.table(name_of("state_parquet")).drop("id").writeTo(keyless).using("parquet").create()
    spark.sql(f"create table {keyless}__changefeed_cursor using parquet as "
              f"select * from {name_of('state_parquet')}__changefeed_cursor")  # fmt: skip
    with pytest.raises(VerifyError, match=r"has no column id, the feed's key"):
        verify(spark, options(pg_uri), keyless, LANDED_TABLE)
    code = main(["verify", "--connection", pg_uri, "--feed", "cf_verify_src.nope",
                 "--table", LANDED_TABLE, "--model", keyless])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 1 and err.startswith("changefeed verify: error: ") and "nope" in err
    assert len(err.splitlines()) == 1, err
    code = main(["verify", "--connection", pg_uri, "--feed", FEED, "--table", LANDED_TABLE,
                 "--model", keyless, "--max-keys", "-1"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 1 and "--max-keys must be 0 or more, got -1" in err


def test_writes_after_the_models_run_are_in_flight_not_differences(
    spark: Any, pg_uri: str, admin: Any, pipeline: dict[str, Any]
) -> None:
    """Last: it writes to the source. In flight while in the database's feed, and still
    once landed (batch 2 is above every model's cursor)."""
    admin.execute(f"update {FEED} set status = 'refunded' where id = 1")
    admin.execute(f"insert into {FEED} values (100, 'new', 1.00, null)")
    admin.execute(f"delete from {FEED} where id = 2")
    # Half the models while the events are in the database's feed, half once landed.
    for landed, models in ((False, MODELS_IN_FEED), (True, MODELS_LANDED)):
        if landed:
            assert land(spark, {**options(pg_uri), "payload": "true"}, LANDED_TABLE).batch == 2
        for model in models:
            result = verify(spark, options(pg_uri), name_of(model), LANDED_TABLE)
            assert result.ok, (landed, model, result.lines())
            assert (result.in_flight, result.equal) == (3, 9), (landed, model)
            assert "3 in flight (written after the model's position" in result.lines()[-1]
    # A real difference among keys in flight is still found: key 3 changed in a copy.
    result = verify(spark, options(pg_uri), f"{name_of('state_parquet')}_tampered", LANDED_TABLE)
    assert dict(result.counts) == {"changed": 1, "missing": 1, "extra": 1, "duplicate": 1}
