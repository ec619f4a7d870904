"""Delta Lake and Iceberg feeds, landing, publishing and consumers, SIGKILLed mid-write and
re-run (docs/spark.md "What the tests cover"; protocol 11.2 and 11.6).

Per format, driver processes (tests/support/spark_kill_scenario.py) share one Derby
metastore and warehouse: one resident driver runs every uninterrupted step, and each of
five writes in schema KILL runs in a fresh driver of its own, SIGKILLed (the whole process
group, JVM included) once a task has written a data file of the write and before its
commit (Delta's ``_delta_log`` entry, Iceberg's new metadata file). Schema BASE runs every
step uninterrupted. The consumers are two, one merging on ``(shard_id, ulid)`` with
``feed_events``, one appending with the safe point and cursor written out; per format,
"first" is the merge consumer on Delta and the append one on Iceberg, "other" the other
one. In order:

* BASE and KILL land batch 1 of a PostgreSQL feed (``changefeed.spark.landing``); BASE
  runs round 1 (a publishing model and both consumers); KILL runs the publishing model and
  "first"; the first run of "other" (a create table as select) is killed.
* That first run re-run; new events; BASE lands batch 2 and runs round 2; KILL's landing
  of batch 2 is killed.
* The landing re-run; KILL's round-2 publishing run is killed.
* The publishing run re-run; the round-2 run of "first" is killed.
* "first" re-run; the round-2 run of "other" is killed.
* Round 2 re-run; then batch 3 is landed, the health models run, and both consumers are
  rebuilt with ``--full-refresh``.

After each kill the killed table is as it was before the step; after the re-runs every
table equals BASE's, row for row, ULIDs and batch numbers included. Iceberg's Hadoop
catalog holds no views, so the health views live in Spark's session catalog (the rule of
docs/spark.md, Table formats), reading the Iceberg tables.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.support import spark_source as kit
from tests.support.dbt_harness import REPO_ROOT
from tests.support.real_parts import unavailable
from tests.support.spark_kill_scenario import (
    PlanResult,
    Resident,
    data_files_written,
    read_dumps,
    run_plan,
)

#: Each format's scenario (six driver JVMs) is charged to its first test; on a busy
#: machine it takes several times its quiet-machine minutes (see conftest's kill scenario).
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(2400)]

BASE, KILL = "cflk_base", "cflk_kill"
LANDED, PUBLISHED = "landed_orders", "lake_published"
MERGED, APPENDED = "lake_merged", "lake_appended"
CONSUMERS = (MERGED, APPENDED)
MODELS = (PUBLISHED, *CONSUMERS)
HEALTH = ("changefeed_feed_health", "changefeed_consumer_health")
#: The consumer whose round-2 run is killed first, per format; the other one's round-2 run
#: is killed next, and its first run (create table as select) before that.
KILLED_CONSUMER = {"delta": MERGED, "iceberg": APPENDED}
OTHER_CONSUMER = {"delta": APPENDED, "iceberg": MERGED}
HINTS = {1: 1_700_000_000_000, 2: 1_699_999_000_000}
#: Slows every row of a killed write (the model's `slow` macro), so the kill lands while
#: its tasks write: the write of round 1 (40 events) or of the publishing model (3 rows).
SLOW = {"CF_TEST_ROW_SLEEP_MS": "150"}
#: The same for a consumer's round-2 run (240 events, two tasks): still seconds of writing
#: to kill in, while a MERGE's first job (which evaluates the source, sleeps included,
#: before it writes anything) takes seconds instead of half a minute.
SLOW_ROUND_2 = {"CF_TEST_ROW_SLEEP_MS": "30"}

#: Events per round and shard: (first id, count). Round 2 is the landing that is killed;
#: its many small pages keep the landing's tasks writing for a while.
EVENTS = {1: (1, 20), 2: (100, 120), 3: (500, 5)}
PAGE_SIZE = 4

SHOP = {
    1: [(1, "new", 0), (2, "new", 1), (3, "new", 1), (4, "new", 0)],
    2: [(1, "shipped", 0), (5, "new", 1), (6, "new", 0)],
}

PROJECT_YML = """name: changefeed_lake_kills
version: '0.1.0'
config-version: 2
profile: changefeed_integration_tests
model-paths: ['models']
macro-paths: ['macros']
packages-install-path: "{{ env_var('CHANGEFEED_DBT_PACKAGES_DIR', 'dbt_packages') }}"
"""

#: Iceberg's Hadoop catalog cannot hold views: the package's health views go to the
#: session catalog, under the target schema's name (docs/spark.md, Table formats).
HEALTH_IN_SESSION_CATALOG = """models:
  changefeed:
    +schema: session_catalog
"""

MACROS = """{% macro generate_schema_name(custom_schema_name, node) -%}
{%- if custom_schema_name == 'session_catalog' -%} spark_catalog.{{ target.schema }}
{%- else -%} {{ default__generate_schema_name(custom_schema_name, node) }}
{%- endif -%}
{%- endmacro %}

{#- Tests only: CF_TEST_ROW_SLEEP_MS slows every row, so that a test can kill a write
    (cf_test_sleep: tests/support/spark_kill_scenario.py). -#}
{% macro slow(column) -%}
{%- set ms = env_var('CF_TEST_ROW_SLEEP_MS', '0') -%}
{%- if ms == '0' -%} true {%- else -%} cf_test_sleep({{ ms }}, {{ column }}) {%- endif -%}
{%- endmacro %}
"""

SOURCES = """version: 2
sources:
  - name: lake
    schema: "{{ target.schema }}"
    tables:
      - name: landed_orders
        meta:
          changefeed_feed: true
      - name: shop_orders
"""

MERGE = "incremental_strategy='merge', unique_key=['shard_id', 'ulid']"

PUBLISHED_SQL = """{{{{ config(materialized='incremental', file_format='{fmt}', {merge},
    changefeed={{'key': ['order_id'], 'shard': 'region',
                 'time_hint': env_var('CF_TEST_TIME_HINT_MS')}}) }}}}
{{% call changefeed.publish_feed() %}}
select o.order_id, o.status, o.wave, o.region from {{{{ source('lake', 'shop_orders') }}}} as o
where {{{{ slow('o.order_id') }}}}
{{% if is_incremental() %}}
  and o.wave > coalesce((select max(wave) from {{{{ this }}}}), 0)
{{% endif %}}
{{% endcall %}}
"""

MERGED_SQL = """{{{{ config(materialized='incremental', file_format='{fmt}', {merge}) }}}}
select e.shard_id, e.ulid, e.id, e.payload.v as v, e.changefeed_feed_batch,
    {{{{ changefeed.feed_batch() }}}} as changefeed_batch
from {{{{ changefeed.feed_events(source('lake', 'landed_orders'),
                                  this if is_incremental() else none) }}}} as e
where {{{{ slow('e.id') }}}}
"""

APPENDED_SQL = """{{{{ config(materialized='incremental', file_format='{fmt}',
    incremental_strategy='append') }}}}
select e.shard_id, e.ulid, e.id, upper(e.payload.v) as v,
    e.changefeed_batch as changefeed_feed_batch,
    {{{{ changefeed.feed_batch() }}}} as changefeed_batch
from {{{{ source('lake', 'landed_orders') }}}} as e
where {{{{ changefeed.feed_safe_point(source('lake', 'landed_orders'), 'e') }}}}
  and {{{{ slow('e.id') }}}}
{{% if is_incremental() %}}
  and {{{{ changefeed.feed_cursor('e') }}}}
{{% endif %}}
"""


def write_project(root: Path, fmt: str) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "macros").mkdir(exist_ok=True)
    extra = HEALTH_IN_SESSION_CATALOG if fmt == "iceberg" else ""
    (root / "dbt_project.yml").write_text(PROJECT_YML + extra)
    (root / "packages.yml").write_text(f"packages:\n  - local: {REPO_ROOT}\n")
    (root / "macros" / "lake.sql").write_text(MACROS)
    (root / "models" / "sources.yml").write_text(SOURCES)
    for name, text in ((PUBLISHED, PUBLISHED_SQL), (MERGED, MERGED_SQL), (APPENDED, APPENDED_SQL)):
        (root / "models" / f"{name}.sql").write_text(text.format(fmt=fmt, merge=MERGE))
    return root


class Format:
    """Names and locations of one format's tables."""

    def __init__(self, fmt: str, work: Path) -> None:
        self.fmt, self.work = fmt, work
        self.schema = {s: f"{s}_{fmt}" for s in (BASE, KILL)}

    def name(self, schema: str, table: str) -> str:
        """The table as the driver (whose current catalog holds the format) names it."""
        return f"{self.schema[schema]}.{table}"

    def landed(self, schema: str) -> str:
        """The landing's target: an Iceberg table is named with its catalog."""
        prefix = "iceberg." if self.fmt == "iceberg" else ""
        return prefix + self.name(schema, LANDED)

    def health(self, schema: str, table: str) -> str:
        prefix = "spark_catalog." if self.fmt == "iceberg" else ""
        return prefix + self.name(schema, table)

    def data_dir(self, schema: str, table: str) -> Path:
        if self.fmt == "iceberg":
            return self.work / "warehouse" / "iceberg" / self.schema[schema] / table / "data"
        return self.work / "warehouse" / f"{self.schema[schema]}.db" / table


def setup(f: Format, schema: str) -> list[dict[str, Any]]:
    namespace = ("iceberg." if f.fmt == "iceberg" else "") + f.schema[schema]
    columns = "order_id bigint, status string, wave int, region int"
    return [
        {"sql": f"create schema if not exists {namespace}"},
        {"sql": f"create table {f.name(schema, 'shop_orders')} ({columns}) using {f.fmt}"},
    ]


def shop(f: Format, schema: str, wave: int) -> dict[str, Any]:
    values = ", ".join(f"({o}, '{s}', {wave}, {r})" for o, s, r in SHOP[wave])
    return {"sql": f"insert into {f.name(schema, 'shop_orders')} values {values}"}


def events(uri: str, feed: str, n: int) -> list[dict[str, Any]]:
    start, count = EVENTS[n]
    spec = {"uri": uri, "feed": feed, "count": count}
    return [{"events": {**spec, "shard": s, "start": start + 10_000 * s}} for s in (0, 1)]


def landing(f: Format, schema: str, options: dict[str, str]) -> dict[str, Any]:
    return {"landing": {"table": f.landed(schema), "format": f.fmt, "options": options}}


def run(f: Format, schema: str, n: int, *select: str, env: dict[str, str] | None = None,
        full_refresh: bool = False) -> dict[str, Any]:  # fmt: skip
    args = ["run", *(["--full-refresh"] if full_refresh else []), "--select"]
    return {
        "dbt": [*args, *(select or MODELS)],
        "schema": f.schema[schema],
        "env": {"CF_TEST_TIME_HINT_MS": str(HINTS[n]), "CF_TEST_ROW_SLEEP_MS": "0", **(env or {})},
    }


def dump(f: Format, out: str, schema: str, *tables: str) -> dict[str, Any]:
    names = [f.name(schema, t) for t in (tables or (LANDED, *MODELS))]
    return {"dump": {"out": out, "tables": names}}


def scenario(f: Format, uri: str, feed: str, packages: Path) -> dict[str, Any]:
    work = f.work
    project = write_project(work / "project", f.fmt)
    plan = {
        "schema": f.schema[KILL], "packages_dir": str(packages), "project_dir": str(project),
        "vars": {"changefeed_health_models": True}, "lakehouse": True, "sleep_udf": True,
        "default_catalog": "iceberg" if f.fmt == "iceberg" else None,
    }  # fmt: skip
    options = kit.options(uri, feed, payload="true", pageSize=PAGE_SIZE)
    results: dict[str, PlanResult] = {}
    consumer, other = KILLED_CONSUMER[f.fmt], OTHER_CONSUMER[f.fmt]

    with Resident(work, plan) as resident:

        def killed(name: str, step: dict[str, Any], schema: str, table: str) -> None:
            directory = f.data_dir(schema, table)
            when = lambda: data_files_written(work, 0, directory)  # noqa: E731
            results[name] = run_plan(work, {**plan, "steps": [step]}, kill_when=when)

        results["round_1"] = resident.run([
            *setup(f, BASE), *setup(f, KILL), *events(uri, feed, 1),
            landing(f, BASE, options), shop(f, BASE, 1), run(f, BASE, 1),
            landing(f, KILL, options), shop(f, KILL, 1), run(f, KILL, 1, PUBLISHED, consumer),
        ])  # fmt: skip
        killed("first", run(f, KILL, 1, other, env=SLOW), KILL, other)

        results["round_2"] = resident.run([
            dump(f, "after_first.json", KILL, other), run(f, KILL, 1, other),
            *events(uri, feed, 2), shop(f, BASE, 2), shop(f, KILL, 2),
            landing(f, BASE, options), run(f, BASE, 2), dump(f, "base.json", BASE),
            dump(f, "before.json", KILL),
        ])  # fmt: skip
        killed("land", landing(f, KILL, options), KILL, LANDED)

        results["relanded"] = resident.run([dump(f, "after_land.json", KILL),
                                            landing(f, KILL, options)])  # fmt: skip
        killed("publish", run(f, KILL, 2, PUBLISHED, env=SLOW), KILL, PUBLISHED)

        results["republished"] = resident.run([dump(f, "after_publish.json", KILL),
                                               run(f, KILL, 2, PUBLISHED)])  # fmt: skip
        killed("consume", run(f, KILL, 2, consumer, env=SLOW_ROUND_2), KILL, consumer)

        results["reconsumed"] = resident.run([dump(f, "after_consume.json", KILL),
                                              run(f, KILL, 2, consumer)])  # fmt: skip
        killed("consume_other", run(f, KILL, 2, other, env=SLOW_ROUND_2), KILL, other)

        results["final"] = resident.run([
            dump(f, "after_consume_other.json", KILL),
            run(f, KILL, 2),
            dump(f, "final.json", KILL),
            *events(uri, feed, 3),
            landing(f, KILL, options),
            run(f, KILL, 2, *HEALTH),
            {"dump": {"out": "health.json",
                      "tables": [f.health(KILL, t) for t in HEALTH]
                      + [f.name(KILL, t) for t in (LANDED, *MODELS)]}},
            run(f, KILL, 2, *CONSUMERS, full_refresh=True),
            dump(f, "full_refresh.json", KILL, LANDED, *CONSUMERS),
        ])  # fmt: skip
    return {"format": f, "results": results, "dumps": read_dumps(work)}


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def lake(
    request: pytest.FixtureRequest, pg_uri: str, dbt: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    from changefeed.local import jars

    try:
        jars.lakehouse_jars()
    except jars.LakehouseJarsMissing as exc:
        unavailable("Delta Lake and Iceberg", str(exc))
    fmt = request.param
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    root = tmp_path_factory.mktemp(f"lake-kills-{fmt}")
    f = Format(fmt, root / "work")
    return scenario(f, pg_uri, feed, tmp_path_factory.getbasetemp() / "lake-kills-packages")


def rows(lake: dict[str, Any], step: str, schema: str, table: str) -> Counter[tuple[Any, ...]]:
    f: Format = lake["format"]
    data = lake["dumps"][step][f.name(schema, table)]
    assert data is not None, f"{f.name(schema, table)} does not exist after {step}"
    return Counter(tuple(r) for r in data["rows"])


def batch_of(table: Counter[tuple[Any, ...]], batch: int) -> Counter[tuple[Any, ...]]:
    """The rows of one batch (``changefeed_batch`` is every table's last column)."""
    return Counter({r: n for r, n in table.items() if r[-1] == batch})


def check_killed(lake: dict[str, Any], name: str) -> PlanResult:
    result: PlanResult = lake["results"][name]
    assert result.failure() is None, result.failure()
    assert result.returncode == -9, (result.killed, result.output)
    assert result.killed and "uncommitted data file" in result.killed, result.killed
    return result


def same(got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]], what: str) -> None:
    assert got == want, f"{what}: {sorted(got - want)} extra, {sorted(want - got)} missing"


def test_uninterrupted_runs_land_publish_and_consume_every_event_once(
    lake: dict[str, Any],
) -> None:
    landed = rows(lake, "base", BASE, LANDED)
    assert max(landed.values()) == 1
    assert Counter(r[-1] for r in landed.elements()) == {1: 40, 2: 240}
    published = rows(lake, "base", BASE, PUBLISHED)
    assert Counter(r[-1] for r in published.elements()) == {1: 4, 2: 3}
    for consumer in CONSUMERS:
        out = rows(lake, "base", BASE, consumer)
        assert Counter(r[:3] for r in out.elements()) == Counter(r[:3] for r in landed.elements())
        assert {(r[-2], r[-1]) for r in out} == {(1, 1), (2, 2)}, "one batch per run"


def test_a_landing_killed_mid_write_reruns_to_the_same_table(lake: dict[str, Any]) -> None:
    check_killed(lake, "land")
    base = rows(lake, "base", BASE, LANDED)
    same(rows(lake, "before", KILL, LANDED), batch_of(base, 1), "before the kill")
    same(rows(lake, "after_land", KILL, LANDED), batch_of(base, 1), "nothing of the killed batch")
    same(rows(lake, "after_publish", KILL, LANDED), base, "the re-run: batch 2, every event once")


def test_a_publishing_run_killed_mid_write_exposes_nothing(lake: dict[str, Any]) -> None:
    check_killed(lake, "publish")
    base = rows(lake, "base", BASE, PUBLISHED)
    same(rows(lake, "after_publish", KILL, PUBLISHED), batch_of(base, 1), "after the kill")
    same(rows(lake, "after_consume", KILL, PUBLISHED), base, "the re-run publishes the same")


def test_a_first_run_killed_mid_write_creates_nothing_and_reruns(lake: dict[str, Any]) -> None:
    """A consumer's first run is a create table as select: killed after its data files are
    written, it leaves no table (or an empty one) and its re-run gives batch 1 once."""
    check_killed(lake, "first")
    f: Format = lake["format"]
    other = OTHER_CONSUMER[f.fmt]
    left = lake["dumps"]["after_first"][f.name(KILL, other)]
    assert left is None or left["rows"] == [], f"the killed first run left {left}"
    base = rows(lake, "base", BASE, other)
    same(rows(lake, "after_land", KILL, other), batch_of(base, 1), "the re-run")


@pytest.mark.parametrize("which", ["first", "other"])
def test_a_consumer_killed_mid_write_reruns_to_the_same_output(
    lake: dict[str, Any], which: str
) -> None:
    """Each consumer strategy (merge on (shard_id, ulid), append) is killed in round 2."""
    fmt = lake["format"].fmt
    consumer = (KILLED_CONSUMER if which == "first" else OTHER_CONSUMER)[fmt]
    check_killed(lake, "consume" if which == "first" else "consume_other")
    base = rows(lake, "base", BASE, consumer)
    after = "after_consume" if which == "first" else "after_consume_other"
    same(rows(lake, after, KILL, consumer), batch_of(base, 1), "after the kill")
    final = lake["results"]["final"]
    assert final.failure() is None, final.failure()
    for table in (LANDED, *MODELS):
        same(rows(lake, "final", KILL, table), rows(lake, "base", BASE, table), table)


def heads(table: Counter[tuple[Any, ...]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for row in table:
        out[row[0]] = max(out.get(row[0], ""), row[1])
    return out


def health_rows(lake: dict[str, Any], table: str) -> list[dict[str, Any]]:
    f: Format = lake["format"]
    data = lake["dumps"]["health"][f.health(KILL, table)]
    assert data is not None, f"{table} was not built"
    return [dict(zip(data["columns"], row, strict=True)) for row in data["rows"]]


def test_health_models_over_the_feeds_and_consumers(lake: dict[str, Any]) -> None:
    f: Format = lake["format"]
    landed = rows(lake, "health", KILL, LANDED)
    published = rows(lake, "health", KILL, PUBLISHED)
    feeds = {("lake.landed_orders", "landed", LANDED): landed,
             (PUBLISHED, "published", PUBLISHED): published}  # fmt: skip
    got = {(r["feed"], r["shard_id"]): r for r in health_rows(lake, HEALTH[0])}
    assert set(got) == {(name, s) for (name, _, _), t in feeds.items() for s in heads(t)}
    for (name, kind, table), feed in feeds.items():
        for shard, head in heads(feed).items():
            row = got[(name, shard)]
            in_shard = [r for r in feed.elements() if r[0] == shard]
            assert (row["feed_kind"], row["feed_relation"]) == (kind, f.name(KILL, table))
            assert row["head"] == head == row["safe_point"]
            assert row["events"] == len(in_shard)
            batches = {r[-1] for r in in_shard}
            assert (row["batches"], row["last_batch"]) == (len(batches), max(batches))

    got = {(r["consumer"], r["shard_id"]): r for r in health_rows(lake, HEALTH[1])}
    assert {c for c, _ in got} == set(CONSUMERS), "the publisher is no consumer"
    for consumer in CONSUMERS:
        cursors = heads(rows(lake, "health", KILL, consumer))
        for shard, head in heads(landed).items():
            row = got[(consumer, shard)]
            unread = sum(1 for r in landed if r[0] == shard and r[1] > cursors[shard])
            assert unread == EVENTS[3][1], "batch 3 is landed and not consumed yet"
            assert (row["feed"], row["cursor"], row["safe_point"]) == (
                "lake.landed_orders", cursors[shard], head)  # fmt: skip
            assert row["lag_events"] == unread
            assert row["lag_ms"] == int(head[:12], 16) - int(cursors[shard][:12], 16)


def test_full_refresh_after_the_kills_rebuilds_the_consumers(lake: dict[str, Any]) -> None:
    final = lake["results"]["final"]
    assert final.failure() is None, final.failure()
    landed = rows(lake, "full_refresh", KILL, LANDED)
    for consumer in CONSUMERS:
        out = rows(lake, "full_refresh", KILL, consumer)
        assert Counter(r[:3] for r in out.elements()) == Counter(r[:3] for r in landed.elements())
        assert {r[-1] for r in out} == {1}, "one batch"
        assert {r[-2] for r in out} == {1, 2, 3}, "each event's feed batch"
