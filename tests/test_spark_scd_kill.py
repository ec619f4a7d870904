"""State consumers killed with SIGKILL while they write, on parquet, Delta and Iceberg
(docs/protocol.md 11.8, C1 for state tables): the re-run gives the state and cursor tables
of an uninterrupted run.

Driver processes (tests/support/spark_kill_scenario.py, Delta and Iceberg on a Derby Hive
metastore) share one warehouse. A resident driver runs the uninterrupted baseline (schema
cfk_base) and the same first round in cfk_kill, lands round 2 and runs it uninterrupted in
cfk_base; then, one format at a time, round 2 in cfk_kill runs in a fresh driver that is
killed while its apply writes, and the resident driver re-runs it:

Per format one model is built and killed (the state table of the other materialization
is the same machinery; tests/test_spark_scd.py runs both on every format):

* parquet, changefeed_history: killed while its rewrite of the touched buckets has part
  files in ``<state>/changefeed_versions/.spark-staging-*`` (no bucket switched yet);
* Delta, changefeed_current_state: killed once the merge has written data files and no
  ``_delta_log`` commit of the run exists;
* Iceberg, changefeed_history: killed once the merge has written data files and no new
  ``metadata.json`` exists.

The killed runs use 64 shuffle partitions without adaptive coalescing, so their write
stage has many tasks and lasts long enough to be caught. A cut between two parquet bucket
switches (the moment Spark's own partition overwrite would have lost a bucket) is in
tests/test_spark_scd.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.support.dbt_harness import package_project
from tests.support.dbt_spark import SCHEMA_MACRO
from tests.support.spark_kill_scenario import (
    PlanResult,
    Resident,
    read_dumps,
    run_plan,
    step_started,
    table_dir,
    written_parts,
)

#: four JVMs with Delta and Iceberg and 16 dbt runs: over 25 minutes at a load average of
#: 14-21 on 2 cores (other jobs), the setup of the first test
pytestmark = [pytest.mark.spark, pytest.mark.timeout(3000)]

SOURCE = "cfk_src"
FEED = f"{SOURCE}.landed"
FEED_REF = "api.Relation.create(schema='spark_catalog." + SOURCE + "', identifier='landed')"
#: the profile's schema per run (dbt's target schema); Iceberg's projects have their own,
#: so that the two projects never share a dbt target directory
SCHEMAS = {"base": ("cfk_base", "cfk_base_i"), "kill": ("cfk_kill", "cfk_kill_i")}
MODEL = """{{{{ config(materialized='{materialization}', unique_key='order_id',
    file_format='{fmt}', buckets=16, delete_when="payload.status = 'deleted'") }}}}
select e.* from {{{{ changefeed.feed_events({feed}, this) }}}} as e
"""
MATERIALIZATIONS = {"current": "changefeed_current_state", "history": "changefeed_history"}
#: format -> the model its kill cuts
KILLED = {"parquet": "history", "delta": "current", "iceberg": "history"}
FORMATS = ("parquet", "delta", "iceberg")
SLOW_WRITE = [
    {"sql": "set spark.sql.shuffle.partitions = 64"},
    {"sql": "set spark.sql.adaptive.enabled = false"},
]
KEYS = 1500


def rows(round_: int) -> list[list[Any]]:
    """Round ``round_``'s landed events: 2000 over KEYS keys and 2 shards; round 2 updates
    and deletes keys of round 1 and adds new ones."""
    out = []
    for i in range(2000):
        key = (i * 7 + round_ * 500) % (KEYS + 500 * round_)
        shard = i % 2
        ulid = (1_700_000_000_000 + round_ * 100_000 + i).to_bytes(6, "big") + bytes([0, shard])
        status = "deleted" if round_ == 2 and i % 11 == 0 else f"s{round_}-{i % 5}"
        out.append([shard, (ulid + i.to_bytes(8, "big")).hex(), key, status])
    return out


def model_name(name: str, fmt: str) -> str:
    return f"{name}_{fmt}"


def projects(root: Path) -> dict[str, Path]:
    """One dbt project per current catalog: parquet and Delta in Spark's, Iceberg in its own
    (tests/test_spark_lakehouse.py)."""
    out = {}
    for catalog, formats in (("spark", ("parquet", "delta")), ("iceberg", ("iceberg",))):
        models = {
            f"{model_name(name, fmt)}.sql": MODEL.format(
                materialization=materialization, fmt=fmt, feed=FEED_REF
            )
            for fmt in formats
            for name, materialization in MATERIALIZATIONS.items()
        }
        path = package_project(root / f"project-{catalog}", f"cf_scd_kill_{catalog}", models)
        (path / "macros").mkdir(exist_ok=True)
        (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
        out[catalog] = path
    return out


def run(run_of: str, fmt: str, paths: dict[str, Path]) -> list[dict[str, Any]]:
    """``dbt run`` of ``fmt``'s model (KILLED) in ``run_of``'s schema."""
    spark_schema, iceberg_schema = SCHEMAS[run_of]
    step = {"dbt": ["run", "--select", model_name(KILLED[fmt], fmt)]}
    if fmt != "iceberg":
        return [{**step, "schema": spark_schema, "project_dir": str(paths["spark"])}]
    return [
        {"sql": "set spark.sql.defaultCatalog = iceberg"},
        {**step, "schema": iceberg_schema, "project_dir": str(paths["iceberg"])},
        {"sql": "set spark.sql.defaultCatalog = spark_catalog"},
    ]


def tables(run_of: str) -> list[str]:
    """The state and cursor tables of every format's model in ``run_of``'s schemas."""
    spark_schema, iceberg_schema = SCHEMAS[run_of]
    out = []
    for fmt in FORMATS:
        schema = (
            f"iceberg.{iceberg_schema}" if fmt == "iceberg" else f"spark_catalog.{spark_schema}"
        )
        table = f"{schema}.{model_name(KILLED[fmt], fmt)}"
        out += [table, f"{table}__changefeed_cursor"]
    return out


def newer_files(directory: Path, pattern: str, since: float) -> list[Path]:
    return [p for p in directory.glob(pattern) if p.stat().st_mtime >= since - 1]


def lake_data_before_commit(
    work: Path, index: int, data: Path, commits: Path, commit_files: str
) -> str | None:
    """A kill condition: during step ``index``, data files were written under ``data`` and
    no commit file (``commit_files`` under ``commits``) of the step exists yet."""
    since = step_started(work, index)
    if since is None or not data.exists():
        return None
    written = newer_files(data, "**/*.parquet", since)
    if written and not newer_files(commits, commit_files, since):
        return f"{len(written)} data files, no commit ({written[0].relative_to(data)})"
    return None


def kill_condition(work: Path, fmt: str) -> Any:
    """When to kill ``fmt``'s killed run (the module docstring), given its step index."""
    name = model_name(KILLED[fmt], fmt)
    if fmt == "parquet":
        versions = table_dir(work, SCHEMAS["kill"][0], name) / "changefeed_versions"
        return lambda index: written_parts(work, index, versions)
    if fmt == "delta":
        state = table_dir(work, SCHEMAS["kill"][0], name)
        return lambda index: lake_data_before_commit(
            work, index, state, state / "_delta_log", "*.json"
        )
    state = work / "warehouse" / "iceberg" / SCHEMAS["kill"][1] / name
    return lambda index: lake_data_before_commit(
        work, index, state / "data", state / "metadata", "*.metadata.json"
    )


def dump(out: str, run_of: str) -> dict[str, Any]:
    return {"dump": {"out": out, "tables": tables(run_of)}}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The resident driver and the three killed ones (the module docstring); their results
    and the tables' dumps."""
    root = tmp_path_factory.mktemp("scd_kill")
    work = root / "work"
    paths = projects(root)
    plan = {"schema": SCHEMAS["base"][0], "packages_dir": str(root / "dbt_packages"),
            "project_dir": str(paths["spark"]), "lakehouse": True}  # fmt: skip
    results: dict[str, PlanResult] = {}

    def every_format(run_of: str) -> list[dict[str, Any]]:
        return [step for fmt in FORMATS for step in run(run_of, fmt, paths)]

    with Resident(work, plan) as resident:
        results["rounds"] = resident.run([
            {"dbt": ["deps"], "project_dir": str(paths["iceberg"])},
            {"sql": f"create database if not exists spark_catalog.{SOURCE}"},
            # the Iceberg (hadoop) catalog cannot list namespaces before its warehouse exists
            *({"sql": f"create namespace if not exists iceberg.{s}"} for _, s in SCHEMAS.values()),
            {"land": {"table": FEED, "rows": rows(1)}},
            *every_format("base"),
            *every_format("kill"),
            {"land": {"table": FEED, "rows": rows(2)}},
            *every_format("base"),
            dump("base.json", "base"),
        ])  # fmt: skip
        for fmt, rerun in zip(FORMATS, (None, "parquet", "delta"), strict=True):
            if rerun is not None:
                rerun_steps = [dump(f"after_kill_{rerun}.json", "kill"), *run("kill", rerun, paths)]
                results[f"rerun_{rerun}"] = resident.run(rerun_steps)
            steps = [*SLOW_WRITE, *run("kill", fmt, paths)]
            index = len(steps) - (2 if fmt == "iceberg" else 1)
            when = kill_condition(work, fmt)
            results[fmt] = run_plan(
                work, {**plan, "steps": steps}, kill_when=lambda when=when, index=index: when(index)
            )
            # a failed step ends the process before its kill: stop at the first
            assert results[fmt].failure() is None, f"{fmt}: {results[fmt].failure()}"
            ended = f"{fmt}: the run ended before its kill\n{results[fmt].output}"
            assert results[fmt].killed, ended
        rerun_iceberg = run("kill", "iceberg", paths)
        results["final"] = resident.run([dump("after_kill_iceberg.json", "kill"), *rerun_iceberg,
                                         dump("final.json", "kill")])  # fmt: skip
    return {"results": results, "dumps": read_dumps(work), "work": work}


def content(dump: dict[str, Any], table: str) -> Counter[tuple[Any, ...]]:
    data = dump[table]
    assert data is not None, f"{table} does not exist"
    return Counter(tuple(r) for r in data["rows"])


def test_each_run_was_killed_mid_write(scenario: dict[str, Any]) -> None:
    for fmt in FORMATS:
        result = scenario["results"][fmt]
        assert result.failure() is None, f"{fmt}: {result.failure()}"
        assert result.killed and result.killed != "timeout", f"{fmt}: not killed\n{result.output}"
    final = scenario["results"]["final"]
    assert final.returncode == 0 and final.failure() is None, final.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_killed_run_left_the_cursor_behind(scenario: dict[str, Any], fmt: str) -> None:
    """The run that follows the kill finds the cursor of round 1 (the kill cut the apply,
    before the cursor commit), so it re-reads round 2."""
    after = scenario["dumps"][f"after_kill_{fmt}"]
    table = next(
        t
        for t in tables("kill")
        if t.endswith(f".{model_name(KILLED[fmt], fmt)}__changefeed_cursor")
    )
    assert [r[-1] for r in content(after, table)] == [1], f"{fmt}: the cursor moved past the kill"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_run_and_its_rerun_equal_an_uninterrupted_run(
    scenario: dict[str, Any], fmt: str
) -> None:
    base, final = scenario["dumps"]["base"], scenario["dumps"]["final"]
    for ours, theirs in zip(tables("base"), tables("kill"), strict=True):
        if f"_{fmt}" not in ours.rsplit(".", 1)[1]:
            continue
        assert content(final, theirs) == content(base, ours), theirs
        assert base[ours]["columns"] == final[theirs]["columns"]
    assert sum(content(base, tables("base")[0]).values()) > 0


def test_parquet_keeps_one_directory_per_bucket(scenario: dict[str, Any]) -> None:
    """Superseded bucket directories are deleted; the killed write's unswitched ones stay
    (debris no reader lists) until a --full-refresh."""
    state = table_dir(
        scenario["work"], SCHEMAS["kill"][0], model_name(KILLED["parquet"], "parquet")
    )
    buckets = list((state / "changefeed_versions").glob("changefeed_bucket=*"))
    assert len(buckets) == 16
    for bucket in buckets:
        writes = list(bucket.glob("changefeed_write=*"))
        assert 1 <= len(writes) <= 2, f"{bucket.name} holds {len(writes)} writes"
