"""Every fenced code block of README.md, docs/*.md and examples/shop/README.md is run or
checked by a test.

A block is covered in one of four ways:

* a marker ``<!-- sample: ID -->`` (code) or ``<!-- output: ID -->`` (output that a test
  compares) on the line before it, and ``ID`` in :data:`REGISTRY`, which names the test;
  that test must fetch the block's exact text with ``sample("ID")``;
* a page whose blocks of one language are run by another test module (:data:`EXTERNAL`,
  e.g. tests/test_pg_docs.py runs docs/postgres.md's Python blocks);
* a block of a page owned by someone else, identified by a digest of its text
  (:data:`OTHERS`), and run by a test here that fetches it with ``block(file, digest)``;
* a block that cannot be run as written (pseudo-code, templates with placeholders):
  listed in :data:`UNTESTABLE` with the reason, and reported by a strict xfail.

:func:`test_every_code_block_is_run_or_checked` fails for any other block, naming its file,
line and digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.doc_blocks import all_blocks, block, in_this_checkout, parse_blocks, sample
from tests.support.pg_feeds import write_shop_events

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# -- what covers which block ----------------------------------------------------------------

HERE = "tests/test_docs_samples.py"
FRESHNESS = "tests/test_spark_freshness.py"
RETENTION = "tests/test_spark_retention.py"
SHARED_CATALOG = "tests/test_shared_catalog.py::test_landing_dbt_and_status_share_one_catalog"
CLUSTER = "tests/test_spark_connect.py::test_connect_and_a_driver_of_its_own_on_a_standalone_cluster"  # noqa: E501
GETTING_STARTED = "tests/test_getting_started.py"
VERIFY = "tests/test_spark_verify.py"
RETENTION_CLI = "test_the_cli_retains_a_spark_feed_and_keeps_what_a_consumer_has_not_read"

#: Marker id -> the test that runs (``sample``) or compares (``output``) that block.
REGISTRY: dict[str, str] = {
    "spark-claim-refused": "tests/test_spark_claims.py::test_a_second_run_of_a_model_is_refused_and_a_dead_holder_blocks_nothing",  # noqa: E501
    "spark-source-feeds-file": "tests/test_landing_service.py::test_the_documented_feeds_file_resolves_as_the_page_says",  # noqa: E501
    "spark-source-service-run": "tests/test_landing_service.py::test_a_service_killed_mid_batch_restarts_with_nothing_lost_or_twice",  # noqa: E501
    "spark-verify": f"{VERIFY}::test_the_documented_command_exits_4_on_a_difference_and_0_on_equality",  # noqa: E501
    "spark-verify-output": f"{VERIFY}::test_the_documented_command_exits_4_on_a_difference_and_0_on_equality",  # noqa: E501
    "python-api-verify": f"{VERIFY}::test_the_documented_python_call",
    "spark-source-new-columns": "tests/test_landing.py::test_a_changed_source_stops_the_landing_naming_each_change_and_the_way_on",  # noqa: E501
    "spark-source-schema-versions": "tests/test_landing_evolution.py::test_a_landed_table_follows_added_dropped_and_widened_columns",  # noqa: E501
    "getting-started-layout": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-install": f"{GETTING_STARTED}::test_install_names_the_make_targets_and_the_venv",  # noqa: E501
    "getting-started-env": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-database": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-table": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-pg-profiles": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-pg-project": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-packages": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-setup": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-writes": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-catalog": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-land": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-spark-profiles": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-spark-project": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-sources": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-events": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-current": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-live": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-history": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-schema-macro": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "getting-started-run": f"{GETTING_STARTED}::test_the_page_end_to_end_twice",
    "snapshot-cli": "tests/test_snapshot.py::test_the_docs_examples_run",
    "snapshot-dbt": "tests/test_snapshot.py::test_the_docs_examples_run",
    "snapshot-python": "tests/test_snapshot.py::test_the_docs_examples_run",
    "snapshot-cancel": "tests/test_snapshot.py::test_a_request_that_cannot_run_fails_alone_and_the_feed_lands_on",  # noqa: E501
    "readme-commands": f"{HERE}::test_readme_commands_are_the_make_targets",
    "readme-architecture": f"{HERE}::test_readme_architecture_names_real_parts",
    "testing-tiers": f"{HERE}::test_testing_tiers_are_make_targets_and_select_tests",
    "readme-demo-summary": "tests/test_demo.py::test_demo_twice_exactly_once_and_incremental",
    "readme-status": "tests/test_demo.py::test_demo_twice_exactly_once_and_incremental",
    "python-api-write": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-outbox": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-read": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-barrier": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-retry": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-land": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-landing-service": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-sparkfeed": f"{HERE}::test_python_api_samples_run_in_order",
    "spark-freshness": f"{FRESHNESS}::test_the_documented_declaration_is_the_tested_one",
    "spark-freshness-command": f"{FRESHNESS}::test_landed_feed_freshness",
    "spark-retention-dbt": f"{RETENTION}::test_dbt_retention_keeps_consumers_exactly_once",
    "spark-retention-behind": f"{RETENTION}::test_dbt_retention_keeps_consumers_exactly_once",
    "shared-catalog-init": SHARED_CATALOG,
    "shared-catalog-profiles": SHARED_CATALOG,
    "deploying-thrift-server": CLUSTER,
    "deploying-thrift-profile": CLUSTER,
    "object-store-catalog": CLUSTER,
    "deploying-spark-submit": CLUSTER,
    "spark-retention-meta": f"{RETENTION}::test_the_documented_meta_is_the_tested_one",
    "operations-retention-spark": f"{RETENTION}::{RETENTION_CLI}",
    "operations-retention-spark-output": f"{RETENTION}::{RETENTION_CLI}",
    "python-api-ulid": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-local": f"{HERE}::test_python_api_samples_run_in_order",
    "python-api-sqlserver": f"{HERE}::test_python_api_sqlserver_sample",
    "python-api-dialects": f"{HERE}::test_python_api_dialects_sample",
    "macros-packages": f"{HERE}::test_macros_packages_yaml",
    "macros-setup-feed": f"{HERE}::test_macros_run_operations",
    "macros-upgrade-feed": f"{HERE}::test_macros_run_operations",
    "macros-post-hook": f"{HERE}::test_post_hook_project_yaml",
    "macros-order-updates": f"{HERE}::test_macros_order_updates_is_the_example_model",
    "macros-ulid": f"{HERE}::test_macros_ulid_sample_on_postgres_and_spark",
    "operations-status": f"{HERE}::test_operations_status",
    "operations-status-output": f"{HERE}::test_operations_status",
    "operations-status-cursor": f"{HERE}::test_operations_status",
    "operations-sql": f"{HERE}::test_operations_sql",
    "operations-metrics": f"{HERE}::test_operations_metrics",
    "operations-metrics-output": f"{HERE}::test_operations_metrics",
    "operations-retention": f"{HERE}::test_operations_retention",
    "operations-retention-output": f"{HERE}::test_operations_retention",
    "operations-retention-dbt": f"{HERE}::test_operations_retention",
    "python-api-retention": f"{HERE}::test_python_api_retention_sample",
    "operations-barrier": f"{HERE}::test_operations_barrier",
    "operations-errors": f"{HERE}::test_operations_errors",
    "operations-sqlserver": "tests/test_cli_sqlserver.py::test_the_operations_sample",
    "operations-upgrade": f"{HERE}::test_operations_upgrade_and_teardown",
    "operations-teardown": f"{HERE}::test_operations_upgrade_and_teardown",
    "shop-help": f"{HERE}::test_shop_demo_help",
    "shop-profile": f"{HERE}::test_shop_profile",
    "shop-oltp-commands": f"{HERE}::shop_database",
    "shop-land": f"{HERE}::test_shop_land",
    "shop-sqlserver-commands": f"{HERE}::test_shop_sqlserver_variant",
    "shop-sqlserver-land": f"{HERE}::test_shop_sqlserver_variant",
}

#: (page, fence language) -> the test that runs every block of that language on the page,
#: and a text its module must contain (the page's name).
EXTERNAL: dict[tuple[str, str], tuple[str, str]] = {
    ("docs/postgres.md", "python"): (
        "tests/test_pg_docs.py::test_the_python_examples_run",
        "postgres.md",
    ),
    ("docs/python-ulid.md", "pycon"): (
        "tests/test_ulid_kernels.py::test_docs_examples_run",
        "python-ulid.md",
    ),
    ("docs/spark-source.md", "python"): (
        "tests/test_landing.py::test_the_docs_examples_run",
        "spark-source.md",
    ),
    ("docs/spark-source.md", "sh"): (
        "tests/test_landing.py::test_the_docs_examples_run",
        "spark-source.md",
    ),
}

#: (page, digest) of other owners' blocks -> the test here that runs or checks them.
OTHERS: dict[tuple[str, str], str] = {}

#: (page, digest) -> why the block cannot be run or checked as written.
UNTESTABLE: dict[tuple[str, str], str] = {}


def _function_source(target: str) -> str | None:
    """The source of the function (test or fixture) ``path::name``, or None."""
    import ast

    path, _, name = target.partition("::")
    file = REPO / path
    if not file.exists():
        return None
    text = file.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(text, node)
    return None


def coverage_problems() -> list[str]:
    problems: list[str] = []
    ids = Counter(b.id for b in all_blocks() if b.id)
    for sample_id, count in ids.items():
        if count > 1:
            problems.append(f"marker {sample_id!r} is used {count} times")
    for sample_id in sorted(set(REGISTRY) - set(ids)):
        problems.append(f"REGISTRY names {sample_id!r}, which no block is marked with")
    digests = {(b.file, b.digest) for b in all_blocks()}
    for key in sorted((set(OTHERS) | set(UNTESTABLE)) - digests):
        problems.append(f"{key[0]} has no block with digest {key[1]} any more")
    for b in all_blocks():
        if b.id is not None:
            target = REGISTRY.get(b.id)
            if target is None:
                problems.append(f"{b.where}: marker {b.id!r} is not in REGISTRY")
                continue
            source = _function_source(target)
            if source is None:
                problems.append(f"{b.where}: {target} (for {b.id!r}) does not exist")
            elif f'sample("{b.id}")' not in source:
                problems.append(f'{b.where}: {target} does not read sample("{b.id}")')
            continue
        external = EXTERNAL.get((b.file, b.info))
        if external is not None:
            target, needle = external
            source = _function_source(target)
            module = REPO / target.partition("::")[0]
            if source is None or needle not in module.read_text():
                problems.append(f"{b.where}: {target} does not exist or does not read {needle}")
            continue
        key = (b.file, b.digest)
        if key in OTHERS:
            source = _function_source(OTHERS[key])
            module = (REPO / OTHERS[key].partition("::")[0]).read_text()
            if source is None or "block(" not in source or b.digest not in module:
                problems.append(f"{b.where}: {OTHERS[key]} does not read block {b.digest}")
            continue
        if key in UNTESTABLE:
            continue
        first = b.text.strip().splitlines()[0] if b.text.strip() else ""
        problems.append(
            f"{b.where} ```{b.info} (digest {b.digest}, {first[:60]!r}): no test runs or checks "
            "this block; mark it <!-- sample: ID --> / <!-- output: ID --> with a test in "
            "REGISTRY, or list it in OTHERS or UNTESTABLE"
        )
    return problems


def test_every_code_block_is_run_or_checked() -> None:
    problems = coverage_problems()
    assert not problems, "\n".join(problems)


@pytest.mark.xfail(
    strict=True,
    reason="samples that cannot be tested as written are listed in "
    "UNTESTABLE; reported to their owners",
)
def test_no_sample_is_untestable() -> None:
    listed = [f"{file} {digest}: {why}" for (file, digest), why in sorted(UNTESTABLE.items())]
    assert not listed, "\n".join(listed)


def test_the_block_parser() -> None:
    text = "x\n<!-- sample: a -->\n```sh\necho 1\n```\n\n  ```text\n  out\n  ```\n"
    path = REPO / ".tmp" / "docs-samples-parser.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    try:
        blocks = parse_blocks(str(path.relative_to(REPO)))
    finally:
        path.unlink()
    assert [(b.info, b.text, b.id) for b in blocks] == [
        ("sh", "echo 1\n", "a"),
        ("text", "out\n", None),
    ]


# -- helpers to run samples -------------------------------------------------------------------


def shell_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO / "python")
    env.update(extra)
    return env


def run_shell(text: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-eo", "pipefail", "-c", text],
        cwd=REPO,
        env=shell_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def database_uri(server_uri: str, database: str) -> str:
    parts = urllib.parse.urlsplit(server_uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


def fresh_database(server_uri: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server_uri, autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    return database_uri(server_uri, name)


def dbt_project(
    project_dir: Path, workdir: Path, profile: str, uri: str, schema: str = "public"
) -> Any:
    from shop_demo._dbt import DbtProject, postgres_output

    return DbtProject(project_dir, workdir, profile, postgres_output(uri, schema))


def run_dbt_lines(text: str, uri: str, workdir: Path, default_project: Path) -> list[str]:
    """Run a shell sample of ``cd DIR`` and ``dbt ...`` lines in-process against ``uri``."""
    project_dir = default_project
    logged: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.strip().startswith("dbt") else raw.strip()
        if not line:
            continue
        words = shlex.split(line)
        if words[0] == "cd":
            project_dir = (REPO / words[1]).resolve()
            continue
        assert words[0] == "dbt", f"not a dbt command: {line}"
        profile = yaml.safe_load((project_dir / "dbt_project.yml").read_text())["profile"]
        project = dbt_project(project_dir, workdir / project_dir.name, profile, uri)
        project.invoke(words[1:], on_log=logged.append)
    return logged


@contextlib.contextmanager
def connection(uri: str) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        yield conn


def run_sql_script(conn: Any, text: str) -> list[list[tuple[Any, ...]]]:
    """Statements of a SQL sample one by one (a statement ends with ';' at a line end)."""
    results: list[list[tuple[Any, ...]]] = []
    statement: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("--") and not statement:
            continue
        statement.append(line)
        if line.split("--", 1)[0].rstrip().endswith(";"):
            cur = conn.execute("\n".join(statement), prepare=False)
            results.append(list(cur.fetchall()) if cur.description else [])
            statement = []
    assert not "".join(statement).strip(), f"unterminated statement: {statement}"
    return results


# -- the shop databases (built by the example's own commands) ---------------------------------


@pytest.fixture(scope="module")
def shop_database(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``name -> uri`` of fresh databases set up by examples/shop/README.md's commands."""
    made: dict[str, str] = {}

    def make(name: str) -> str:
        if name not in made:
            uri = fresh_database(pg_uri, name)
            logged = run_dbt_lines(
                sample("shop-oltp-commands"), uri, tmp_path_factory.mktemp(name), REPO
            )
            assert any("feed shop.payments created" in m for m in logged), logged
            made[name] = uri
        return made[name]

    return make


@pytest.fixture(scope="module")
def ops_uri(shop_database: Any) -> str:
    uri: str = shop_database("cf_docs_ops")
    write_shop_events(uri)
    return uri


# -- README -----------------------------------------------------------------------------------


def test_readme_commands_are_the_make_targets() -> None:
    text = sample("readme-commands")
    commands = [line.split("#")[0].strip() for line in text.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    # Each does all the set-up: the Java check, the venv and the Maven jars.
    assert re.search(
        r"^demo: java venv jars\n\tPYTHONPATH=examples/shop \$\(BIN\)/python -m shop_demo",
        makefile,
        re.M,
    )
    assert re.search(r"^test: test-setup\n", makefile, re.M)
    assert_test_setup_does_everything(makefile)


def assert_test_setup_does_everything(makefile: str) -> None:
    """``test-setup`` (every test tier's prerequisite) checks Java, builds both
    environments, fetches the jars, builds the class-data archive and runs ruff and mypy."""
    found = re.search(r"^test-setup: java\n((?:\t.*\n)+)", makefile, re.M)
    assert found, makefile
    targets = {t for line in found.group(1).splitlines() for t in line.split()[3:]}
    assert targets == {"venv", "jars", "compat-venv", "jvm-archive", "lint", "typecheck"}
    assert re.search(r"^lint: venv\n\t\$\(BIN\)/ruff check ", makefile, re.M)
    assert re.search(r"^typecheck: venv\n\t\$\(BIN\)/mypy\n", makefile, re.M)


def test_readme_architecture_names_real_parts() -> None:
    """The diagram's places are the checkout's directories and its commands the CLI's."""
    from changefeed.cli import build_parser

    text = sample("readme-architecture")
    assert text.startswith("flowchart LR\n")
    paths = re.findall(r"(?<![\w/])((?:macros|python)/[\w/]+)", text)
    assert len(paths) >= 5, paths
    missing = [p for p in paths if not (REPO / p).is_dir()]
    assert not missing, f"the diagram names directories that do not exist: {missing}"
    commands = set(re.findall(r"changefeed (\w+)", text))
    assert commands == {"land", "status"}, commands
    import argparse

    subcommands = {
        name
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    assert commands <= subcommands, subcommands
    # Both databases and the three formats the landing writes are named.
    for word in ("PostgreSQL", "SQL Server", "Delta", "Iceberg", "parquet", "safe point"):
        assert word in text, word


# -- docs/python-api.md -----------------------------------------------------------------------

PYTHON_API = [
    "python-api-write",
    "python-api-outbox",
    "python-api-read",
    "python-api-barrier",
    "python-api-retry",
    "python-api-land",
    "python-api-landing-service",
    "python-api-sparkfeed",
    "python-api-ulid",
    "python-api-local",
]


def test_python_api_dialects_sample(capsys: Any) -> None:
    exec(compile(sample("python-api-dialects"), "docs/python-api.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == [
        "sqlserver ('mssql', 'sqlserver') sqlserver",
        "SqlServerFeed ['postgres', 'sqlserver']",
    ]


def test_python_api_sqlserver_sample(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """The SqlServerFeed sample, run as written against the recording fake of
    tests/support/sqlserver_fake.py (no SQL Server runs here): it must send the protocol's batches
    in order and print the page."""
    import pymssql
    from tests.support.sqlserver_fake import FakeServer

    server = FakeServer()
    names = {k: f"{k}:shop.orders" for k in ("lock", "update_state", "release", "ulid",
             "sequence", "feed", "read_feed", "safe_point", "barrier_acquire",
             "barrier_check")}  # fmt: skip
    ulid = bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b")
    server.on(r"from \[changefeed\]\.\[feeds\] where feed_id = N'shop\.orders'",
              (["mode", "keys", "names", "source_schema", "source_table"],
               [("blocking", '[["order_id", "bigint"]]', json.dumps(names), "shop",
                 "orders")]))  # fmt: skip
    server.on(r"\[lock:shop\.orders\]", (["write_id", "ulid_high", "ulid_low", "session_id"],
              [("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", ulid[:8], 0, 57)]))  # fmt: skip
    server.on(r"^insert into|exec \[changefeed\]\.\[update_state", ([], []))
    server.on(r"read_feed", (["ulid", "order_id"], [(ulid, 42)]))
    server.on(r"barrier_acquire", (["position", "outbox_sequence"], [(ulid, None)]))
    server.on(r"barrier_check", (["released"], [(1,)]))
    monkeypatch.setattr(pymssql, "connect", server.connect)
    exec(compile(sample("python-api-sqlserver"), "docs/python-api.md", "exec"), {})
    assert server.connects[0]["password"] == "secret"
    kinds = []
    for statement in server.statements:
        named = re.search(r"\[changefeed\]\.\[([a-z_]+)[:\]]", statement)
        kinds.append(named.group(1) if named else statement.split(" (")[0])
    assert kinds == ["feeds", "lock", "insert into shop.orders", "feed", "update_state",
                     "read_feed", "barrier_acquire", "barrier_check"]  # fmt: skip
    assert capsys.readouterr().out == "01ARZ3NDEKTSV4RRFFQ69G5FAV (42,)\n"


@pytest.mark.spark
def test_python_api_samples_run_in_order(
    shop_database: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = shop_database("cf_docs_api")
    for table in ("orders_feed", "orders_all"):
        spark.sql(f"drop table if exists shop_landing.{table}")
    texts = {
        "python-api-write": sample("python-api-write"),
        "python-api-outbox": sample("python-api-outbox"),
        "python-api-read": sample("python-api-read"),
        "python-api-barrier": sample("python-api-barrier"),
        "python-api-retry": sample("python-api-retry"),
        "python-api-land": sample("python-api-land"),
        "python-api-landing-service": sample("python-api-landing-service"),
        "python-api-sparkfeed": sample("python-api-sparkfeed"),
        "python-api-ulid": sample("python-api-ulid"),
        "python-api-local": sample("python-api-local"),
    }
    assert list(texts) == PYTHON_API
    namespace: dict[str, Any] = {"uri": uri, "spark": spark}
    try:
        for sample_id, text in texts.items():
            exec(compile(text, f"docs/python-api.md [{sample_id}]", "exec"), namespace)
        out = capsys.readouterr().out
        assert "True 0" in out
        assert "feed 'shop.nope' is not registered" in out
        assert "shop_landing.orders_feed: batch 1, 2 events from 1 shard" in out
        assert "shop.orders -> shop_landing.orders_all: ok, 1 batch, 2 events in 1 run" in out
        assert "PostgreSQL 16" in out
        result = namespace["result"]
        assert (result.batch, result.events) == (1, 2)
        with connection(uri) as conn:
            status = conn.execute("select status from shop.orders").fetchone()[0]
        assert status == "shipped"
    finally:
        if "conn" in namespace:
            namespace["conn"].close()
        for table in ("orders_feed", "orders_all"):
            spark.sql(f"drop table if exists shop_landing.{table}")


# -- docs/macros.md ---------------------------------------------------------------------------


def test_macros_packages_yaml(tmp_path: Path) -> None:
    """The sample installs as written: from a dbt project next to a checkout named
    changefeed, its local path is this package (no URL or tag that does not exist)."""
    config = yaml.safe_load(sample("macros-packages"))
    (package,) = config["packages"]
    assert set(package) == {"local"}
    (tmp_path / "changefeed").symlink_to(REPO, target_is_directory=True)
    (tmp_path / "my_project").mkdir()
    installed = (tmp_path / "my_project" / package["local"]).resolve()
    assert yaml.safe_load((installed / "dbt_project.yml").read_text())["name"] == "changefeed"


@pytest.mark.postgres
def test_macros_run_operations(shop_database: Any, tmp_path: Path) -> None:
    uri = shop_database("cf_docs_macros")
    oltp = REPO / "examples" / "shop" / "oltp"
    logged = run_dbt_lines(sample("macros-setup-feed"), uri, tmp_path, oltp)
    assert logged == ["changefeed: feed shop.orders is already set up (blocking); nothing to do"]
    run_dbt_lines(sample("macros-upgrade-feed"), uri, tmp_path, oltp)
    with connection(uri) as conn:
        row = conn.execute("select mode from changefeed.feeds where feed_id = 'shop.orders'")
        assert row.fetchone()[0] == "blocking"


def _project_with(
    tmp_path: Path, name: str, project_extra: dict[str, Any], files: dict[str, str]
) -> Path:
    project = tmp_path / name
    (project / "models").mkdir(parents=True)
    config = {
        "name": name,
        "version": "1.0.0",
        "config-version": 2,
        "profile": name,
        "model-paths": ["models"],
        "packages-install-path": "{{ env_var('CHANGEFEED_DBT_PACKAGES_DIR', 'dbt_packages') }}",
        **project_extra,
    }
    (project / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (project / "packages.yml").write_text(yaml.safe_dump({"packages": [{"local": str(REPO)}]}))
    for relative, text in files.items():
        (project / relative).write_text(text)
    return project


@pytest.mark.postgres
def test_post_hook_project_yaml(pg_uri: str, tmp_path: Path) -> None:
    """docs/macros.md's dbt_project.yml snippet sets up the feed of a model when built."""
    uri = fresh_database(pg_uri, "cf_docs_post_hook")
    snippet = yaml.safe_load(sample("macros-post-hook"))
    project = _project_with(
        tmp_path,
        "my_project",
        snippet,
        {
            "models/order_totals.sql": "select 42::bigint as order_id, 'new'::text as note",
            "models/no_feed.sql": "select 1 as id",
        },
    )
    warnings: list[str] = []
    dbt_project(project, tmp_path / "work", "my_project", uri, "cf_docs").invoke(
        ["run"], on_warning=warnings.append
    )
    assert warnings == []  # the documented +meta form: no deprecation (dbt 1.11's D041)
    with connection(uri) as conn:
        rows = conn.execute("select feed_id, mode from changefeed.feeds").fetchall()
        assert rows == [("cf_docs.order_totals", "outbox")]
        # the model's first run wrote an event for its one row
        assert conn.execute(
            'select shard_id, order_id from changefeed."outbox:cf_docs.order_totals"'
        ).fetchall() == [(0, 42)]


def test_macros_order_updates_is_the_example_model() -> None:
    """The reference shows the example's model verbatim; tests/test_demo.py runs that file."""
    model = REPO / "examples" / "shop" / "analytics" / "models" / "order_updates.sql"
    assert sample("macros-order-updates") == model.read_text()


@pytest.mark.postgres
@pytest.mark.spark
def test_macros_ulid_sample_on_postgres_and_spark(dbt: Any, pg_uri: str, spark: Any) -> None:
    text = sample("macros-ulid")
    expected_text = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    with connection(pg_uri) as conn:
        row = conn.execute(dbt.render(text, "postgres")).fetchone()
    assert row[0] == expected_text
    assert row[1].isoformat() == "2016-07-30T23:54:10.259000+00:00"
    row = spark.sql(dbt.render(text, "spark")).collect()[0]
    assert row[0] == expected_text
    stamp = spark.sql(
        "select date_format(t, 'yyyy-MM-dd HH:mm:ss.SSS') from ("
        + dbt.render(text, "spark")
        + ") as s(u, t)"
    ).collect()[0][0]
    assert stamp == "2016-07-30 23:54:10.259"


# -- docs/operations.md ----------------------------------------------------------------------


def _normalise(text: str) -> str:
    text = re.sub(r"\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b", "<ULID>" + " " * 20, text)
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", "<TIME>" + " " * 18, text)


@pytest.mark.postgres
def test_operations_status(ops_uri: str) -> None:
    result = run_shell(sample("operations-status"), CHANGEFEED_CONNECTION=ops_uri)
    assert result.returncode == 0, result.stderr
    assert _normalise(result.stdout) == _normalise(sample("operations-status-output"))
    result = run_shell(sample("operations-status-cursor"), CHANGEFEED_CONNECTION=ops_uri)
    assert result.returncode == 0, result.stderr
    lag = json.loads(result.stdout)["consumers"]
    assert [(c["feed"], c["shard"], c["lag_events"]) for c in lag] == [("shop.orders", 0, 1)]


@pytest.mark.postgres
def test_operations_metrics(ops_uri: str, tmp_path: Path) -> None:
    """The command writes the exposition to a file; every documented sample line is in it."""
    result = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", sample("operations-metrics")],
        cwd=tmp_path, env=shell_env(CHANGEFEED_CONNECTION=ops_uri), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "changefeed.prom").read_text().splitlines()
    for line in sample("operations-metrics-output").splitlines():
        assert line in written, line


@pytest.mark.postgres
def test_operations_retention(shop_database: Any, tmp_path: Path) -> None:
    uri = shop_database("cf_docs_retention")
    write_shop_events(uri)
    result = run_shell(sample("operations-retention"), CHANGEFEED_CONNECTION=uri)
    assert result.returncode == 0, result.stderr
    assert result.stdout == sample("operations-retention-output")
    oltp = REPO / "examples" / "shop" / "oltp"
    logged = run_dbt_lines(sample("operations-retention-dbt"), uri, tmp_path, oltp)
    assert "changefeed: feed shop.orders shard 0: removed 0 event(s)" in logged, logged


@pytest.mark.postgres
def test_python_api_retention_sample(
    shop_database: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/python-api.md's retention sample, with the names the samples before it define."""
    from changefeed.client import ZERO_ULID, PostgresFeed

    uri = shop_database("cf_docs_api_retention")
    write_shop_events(uri)
    with connection(uri) as conn:
        orders = PostgresFeed("shop.orders")
        namespace = {"conn": conn, "orders": orders, "ZERO_ULID": ZERO_ULID}
        exec(compile(sample("python-api-retention"), "docs/python-api.md", "exec"), namespace)
        assert capsys.readouterr().out.splitlines() == ["0 0 0", "1 0 0"]
        assert orders.consumers(conn) == []


@pytest.mark.postgres
def test_operations_sql(ops_uri: str) -> None:
    with connection(ops_uri) as conn:
        safe_point, incidents = run_sql_script(conn, sample("operations-sql"))
    assert len(safe_point) == 1 and safe_point[0][0] == safe_point[0][1]  # safe point = head
    assert incidents == []


@pytest.mark.postgres
def test_operations_barrier(shop_database: Any) -> None:
    uri = shop_database("cf_docs_barrier")
    write_shop_events(uri)
    result = run_shell(sample("operations-barrier"), CHANGEFEED_CONNECTION=uri)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("shop.payments shard 0: released in ")


def _error_pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split("...")))


@pytest.mark.postgres
def test_operations_errors(ops_uri: str, tmp_path: Path) -> None:
    """Each documented error line is what the command prints ('...' stands for details)."""
    lines = sample("operations-errors").splitlines()
    assert len(lines) == 4
    no_java = tmp_path / "bin"
    no_java.mkdir()
    (tmp_path / "wh" / "metastore_db").mkdir(parents=True)
    env = shell_env(CHANGEFEED_CONNECTION=ops_uri)
    env.pop("JAVA_HOME", None)
    env["PATH"] = str(no_java)
    runs = [
        [
            sys.executable,
            "-m",
            "changefeed.cli",
            "status",
            "--connection",
            "postgresql://app:secret@localhost:5433/shop",
        ],
        [sys.executable, "-m", "changefeed.cli", "status", "--feed", "shop.order"],
        [
            sys.executable,
            "-m",
            "changefeed.cli",
            "barrier",
            "--feed",
            "shop.orders",
            "--position",
            "01ARZ3NDEKTSV4RRFFQ69G5FAU",
        ],
        [
            sys.executable,
            "-m",
            "changefeed.cli",
            "status",
            "--consumer",
            "shop.orders=shop_landing.orders_feed",
            "--warehouse",
            str(tmp_path / "wh"),
        ],
    ]
    for line, argv in zip(lines, runs, strict=True):
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 1
        assert _error_pattern(line).fullmatch(result.stderr.strip()), (line, result.stderr)


@pytest.mark.postgres
def test_operations_upgrade_and_teardown(shop_database: Any, tmp_path: Path) -> None:
    uri = shop_database("cf_docs_teardown")
    oltp = REPO / "examples" / "shop" / "oltp"
    logged = run_dbt_lines(sample("operations-upgrade"), uri, tmp_path, oltp)
    assert any("shop.orders" in m for m in logged) or logged == []
    run_dbt_lines(sample("operations-teardown"), uri, tmp_path, oltp)
    with connection(uri) as conn:
        feeds = [r[0] for r in conn.execute("select feed_id from changefeed.feeds").fetchall()]
        outbox = conn.execute("select to_regclass('changefeed.\"outbox:shop.payments\"')")
        assert outbox.fetchone()[0] is None
    assert feeds == ["shop.orders"]


# -- examples/shop/README.md ------------------------------------------------------------------


def test_shop_demo_help() -> None:
    text = sample("shop-help")
    assert text.startswith("PYTHONPATH=examples/shop .venv/bin/python ")
    result = run_shell(in_this_checkout(text))
    assert result.returncode == 0, result.stderr
    for option in ("--duration", "--rate", "--cycle", "--reset", "--state-dir"):
        assert option in result.stdout


def test_shop_profile() -> None:
    from shop_demo._dbt import postgres_output

    profiles = yaml.safe_load(sample("shop-profile"))
    project = yaml.safe_load((REPO / "examples/shop/oltp/dbt_project.yml").read_text())
    assert list(profiles) == [project["profile"]]
    outputs = profiles[project["profile"]]["outputs"]
    assert {name: o["type"] for name, o in outputs.items()} == {
        "postgres": "postgres",
        "sqlserver": "sqlserver",
    }
    # The postgres target has exactly the fields of the profile the demo runs with.
    assert set(outputs["postgres"]) == set(postgres_output("postgresql://u@h/db", "s"))
    assert {"driver", "server", "port", "database", "schema", "user", "password"} <= set(
        outputs["sqlserver"]
    )


@pytest.mark.spark
def test_shop_land(
    shop_database: Any,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`changefeed land` as written (in-process: local Spark is this test session)."""
    from changefeed.cli import main

    uri = shop_database("cf_docs_land")
    write_shop_events(uri)
    spark.sql("drop table if exists shop_landing.orders_feed")
    monkeypatch.setenv("CHANGEFEED_CONNECTION", uri)
    monkeypatch.chdir(tmp_path)
    words = shlex.split(os.path.expandvars(sample("shop-land")).replace("\\\n", " "))
    assert words[0] == "changefeed"
    try:
        assert main(words[1:]) == 0
        assert "shop_landing.orders_feed: batch 1, 2 events" in capsys.readouterr().out
        assert spark.table("shop_landing.orders_feed").count() == 2
    finally:
        spark.sql("drop table if exists shop_landing.orders_feed")


def test_shop_sqlserver_variant() -> None:
    """The SQL Server commands: the operations exist, their T-SQL parses, the landing's
    command line is accepted (there is no SQL Server here to run them)."""
    from tests.support.tsql import parse_problems

    from changefeed.cli import build_parser
    from changefeed.cli.land import source_options
    from changefeed.spark.source import parse_connection

    macros = REPO / "examples" / "shop" / "oltp" / "macros"
    sources = "".join(p.read_text() for p in macros.glob("*.sql"))
    for line in sample("shop-sqlserver-commands").splitlines():
        words = shlex.split(line)
        assert words[:2] == ["dbt", "run-operation"] and words[3:] == ["--target", "sqlserver"]
        assert f"{{% macro {words[2]}()" in sources
    # create_shop_tables' T-SQL (plain SQL in the macro, no Jinja) parses as T-SQL;
    # setup_shop_feeds only calls changefeed.setup_feed, whose T-SQL has its own tests.
    text = (macros / "create_shop_tables.sql").read_text()
    body = text.split("{% macro sqlserver__create_shop_tables_sql() %}", 1)[1]
    body = body.split("{% endmacro %}", 1)[0]
    assert "{{" not in body and "{%" not in body
    assert parse_problems(body) == []
    words = shlex.split(sample("shop-sqlserver-land").replace("\\\n", " "))
    args = build_parser().parse_args(words[1:])
    options = source_options(args)
    assert parse_connection(options["connection"]).dialect == "sqlserver"
    assert (args.feed, args.table, args.payload) == (
        "shop.orders",
        "shop_landing.orders_feed",
        True,
    )


# -- other owners' pages (blocks found by digest; see OTHERS and UNTESTABLE) ---------------

PG_SH = ("docs/postgres.md", "738d54c333d4")
PG_BLOCKING_SQL = ("docs/postgres.md", "064029a5b079")
PG_OUTBOX_SQL = ("docs/postgres.md", "e5da92b18272")
PG_GRANTS = ("docs/postgres.md", "70f4facbf5b8")
PG_TOMBSTONE = ("docs/postgres.md", "a13c8128abeb")
PG_POST_HOOK = ("docs/postgres.md", "23e2fe6945ec")
PG_CAPTURE_SH = ("docs/postgres.md", "4f0c87515594")
PG_CAPTURE_SQL = ("docs/postgres.md", "c3970bc0d76e")
SQLSERVER_POST_HOOK = ("docs/sqlserver.md", "23e2fe6945ec")
SQLSERVER_SH = ("docs/sqlserver.md", "9e53208c9784")
SQLSERVER_NAMES = ("docs/sqlserver.md", "4ed17ac3a701")
SQLSERVER_TSQL = [
    ("docs/sqlserver.md", "531de2b39c2d"), ("docs/sqlserver.md", "4738432cbe6d"),
    ("docs/sqlserver.md", "8e9b5e983961"),
    ("docs/sqlserver.md", "202497d8a7cc"), ("docs/sqlserver.md", "bfb159a19ddb"),
    ("docs/sqlserver.md", "a92514c00fa2"), ("docs/sqlserver.md", "4fbb3d379ee3"),
    ("docs/sqlserver.md", "afef84dc54cb"), ("docs/sqlserver.md", "386eac4a24d9"),
    ("docs/sqlserver.md", "39c0537a5446"),
]  # fmt: skip
PROTOCOL_YAML = ("docs/protocol.md", "8698c6f5f285")
SPARK_SOURCE_OFFSET = ("docs/spark-source.md", "1591be8699f1")
UDFS_PYTHON = ("docs/spark-udfs.md", "c3263ffd64a7")
UDFS_STRICT_ERROR = ("docs/spark-udfs.md", "691e487567df")
UDFS_MACROS = ("docs/spark-udfs.md", "c6bb2d81c291")

OTHERS.update({
    PG_SH: f"{HERE}::test_others_postgres_guide_sh_and_sql",
    PG_BLOCKING_SQL: f"{HERE}::test_others_postgres_guide_sh_and_sql",
    PG_OUTBOX_SQL: f"{HERE}::test_others_postgres_guide_sh_and_sql",
    PG_GRANTS: f"{HERE}::test_others_postgres_guide_sh_and_sql",
    PG_TOMBSTONE: f"{HERE}::test_others_postgres_guide_sh_and_sql",
    PG_POST_HOOK: f"{HERE}::test_others_post_hook_configs",
    PG_CAPTURE_SH: f"{HERE}::test_others_postgres_capture",
    PG_CAPTURE_SQL: f"{HERE}::test_others_postgres_capture",
    SQLSERVER_POST_HOOK: f"{HERE}::test_others_post_hook_configs",
    PROTOCOL_YAML: f"{HERE}::test_others_post_hook_configs",
    SQLSERVER_SH: f"{HERE}::test_others_sqlserver_guide",
    SQLSERVER_NAMES: f"{HERE}::test_others_sqlserver_guide",
    **{key: f"{HERE}::test_others_sqlserver_guide" for key in SQLSERVER_TSQL},
    SPARK_SOURCE_OFFSET: f"{HERE}::test_others_spark_source_offset",
    UDFS_PYTHON: f"{HERE}::test_others_spark_udfs_guide",
    UDFS_STRICT_ERROR: f"{HERE}::test_others_spark_udfs_guide",
    UDFS_MACROS: f"{HERE}::test_others_spark_udfs_guide",
})  # fmt: skip

UNTESTABLE.update({
    ("docs/sqlserver.md", "da7079046450"): "needs Docker and a SQL Server container",
    ("docs/sqlserver.md", "966bf28a40bd"): "needs an Azure SQL logical server",
    ("docs/protocol.md", "0fb32330dda0"): "a byte-layout diagram, not code",
    ("docs/protocol.md", "b2967faf150f"): "pseudo-SQL for both adapters (call/exec, <feed>)",
    ("docs/protocol.md", "11ef2d476249"): "pseudo-code of the lock algorithm",
    ("docs/protocol.md", "cb9ddc954696"): "a template with <feed>, <keys> and (...)",
    ("docs/protocol.md", "5812ff04eddd"): "definitions in notation (||, least over ...)",
    ("docs/protocol.md", "a4ccaea05957"): "pseudo-code of the barrier loop",
    ("docs/spark.md", "9dad949b250e"): "a dbt unit test with `rows: [...]` placeholders",
    ("docs/protocol.md", "02ba42e6755f"): "a template with <schema>, <table> and L "
    "(the landing and feed_batch run the real statements; tests/test_spark_* kill tests)",
})  # fmt: skip


def _postgres_guide_tables(uri: str) -> None:
    with connection(uri) as conn:
        conn.execute("create schema if not exists shop")
        conn.execute("create table shop.orders (order_id bigint primary key, note text)")
        conn.execute("create table shop.items (region int, sku text, price int, "
                     "primary key (region, sku))")  # fmt: skip
        conn.execute("insert into shop.items values (1, 'a', 5)")
        conn.execute('create schema "my.schema"')
        conn.execute('create table "my.schema"."we""ird" (id bigint primary key)')
        conn.execute('create table "my.schema"."we]ird" (id bigint primary key)')


@pytest.mark.postgres
def test_others_postgres_guide_sh_and_sql(pg_uri: str, tmp_path: Path) -> None:
    """docs/postgres.md: the setup commands, then the blocking and outbox SQL protocols,
    the grants (in a database named like the page's), and the tombstone queries."""
    from changefeed.client import PostgresFeed

    uri = fresh_database(pg_uri, "cf_docs_pg_guide")
    _postgres_guide_tables(uri)
    oltp = REPO / "examples" / "shop" / "oltp"
    logged = run_dbt_lines(block(*PG_SH), uri, tmp_path, oltp)
    assert len([m for m in logged if " created (" in m]) == 3, logged
    with connection(uri) as conn:
        run_sql_script(conn, block(*PG_BLOCKING_SQL))
        run_sql_script(conn, block(*PG_OUTBOX_SQL))
        assert [e.key for e in PostgresFeed("shop.orders").read_page(conn, 0).events] == [(42,)]
        assert [e.key for e in PostgresFeed("shop.items").read_page(conn, 0).events] == [(1, "a")]
        for role in ("app_service", "etl_reader"):
            conn.execute(f"do $$ begin create role {role}; exception when duplicate_object "
                         "then null; end $$")  # fmt: skip
        # The roles' names carry the database's name; the page's database is `postgres`.
        grants = block(*PG_GRANTS).replace(":postgres.", ":cf_docs_pg_guide.")
        run_sql_script(conn, grants)
        sessions, (won,) = run_sql_script(conn, block(*PG_TOMBSTONE))
        assert sessions == [] and won == (False,)


@pytest.mark.postgres
def test_others_postgres_capture(pg_uri: str, tmp_path: Path) -> None:
    """docs/postgres.md, capture by trigger: the setup command, then a writer's transaction
    that only touches the source table; the outbox rows are the ones the comments name."""
    from changefeed.client import PostgresFeed

    uri = fresh_database(pg_uri, "cf_docs_pg_capture")
    _postgres_guide_tables(uri)
    logged = run_dbt_lines(block(*PG_CAPTURE_SH), uri, tmp_path, REPO / "examples/shop/oltp")
    assert any(" created (outbox" in m and "capture: trigger, shard region % 4" in m
               for m in logged), logged  # fmt: skip
    with connection(uri) as conn:
        run_sql_script(conn, block(*PG_CAPTURE_SQL))
        rows = conn.execute('select shard_id, region, sku from changefeed."outbox:shop.items" '
                            "order by order_sequence").fetchall()  # fmt: skip
        assert rows == [(1, 1, "a"), (2, 2, "b")]
        items = PostgresFeed("shop.items")
        assert [e.key for e in items.read_page(conn, 1).events] == [(1, "a")]
        assert [e.key for e in items.read_page(conn, 2).events] == [(2, "b")]


@pytest.mark.postgres
def test_others_post_hook_configs(pg_uri: str, tmp_path: Path) -> None:
    """The post-hook configs of docs/postgres.md and docs/sqlserver.md (dbt_project.yml) and
    of docs/protocol.md section 10 (a properties file), each built once with dbt."""
    uri = fresh_database(pg_uri, "cf_docs_post_hooks")
    orders = "select 42::bigint as order_id, 'new'::text as note"
    for index, (key, schema) in enumerate([(PG_POST_HOOK, "cf_hook_pg"),
                                           (SQLSERVER_POST_HOOK, "cf_hook_mssql")]):  # fmt: skip
        project = _project_with(tmp_path / str(index), "shop", yaml.safe_load(block(*key)),
                                {"models/order_totals.sql": orders})  # fmt: skip
        dbt_project(project, tmp_path / f"work{index}", "shop", uri, schema).invoke(["run"])
    hook = {"models": {"+post-hook": "{{ changefeed.feed_post_hook() }}"}}
    project = _project_with(tmp_path / "protocol", "shop", hook, {
        "models/orders.sql": orders, "models/schema.yml": block(*PROTOCOL_YAML)})  # fmt: skip
    dbt_project(project, tmp_path / "work-protocol", "shop", uri, "cf_hook_protocol").invoke(
        ["run"]
    )
    with connection(uri) as conn:
        rows = conn.execute(
            "select feed_id, mode, options from changefeed.feeds order by 1"
        ).fetchall()
        assert [(r[0], r[1], r[2]["capture"]) for r in rows] == [
            ("cf_hook_mssql.order_totals", "outbox", "trigger"),
            ("cf_hook_pg.order_totals", "outbox", "trigger"),
            ("cf_hook_protocol.orders", "outbox", "trigger")]  # fmt: skip
        assert rows[2][2]["shard"] == "order_id % 8"
        # the model's first run wrote an event for its row, and the capture triggers record
        # every later write
        conn.execute("insert into cf_hook_protocol.orders values (43, 'new')")
        assert conn.execute(
            'select shard_id, order_id from changefeed."outbox:cf_hook_protocol.orders"'
            " order by order_id"
        ).fetchall() == [(2, 42), (3, 43)]


def _long_name(kind: str, feed: str, limit: int = 128) -> str:
    name = f"{kind}:{feed}"
    if len(name) <= limit:
        return name
    suffix = "~" + hashlib.md5(feed.encode()).hexdigest()[:8]
    return f"{kind}:{feed[: limit - len(kind) - 1 - len(suffix)]}{suffix}"


@pytest.mark.postgres
def test_others_sqlserver_guide(pg_uri: str, tmp_path: Path) -> None:
    """docs/sqlserver.md without a SQL Server: the setup commands run (on PostgreSQL: same
    macro, same arguments), the long names follow the rule, and every T-SQL block parses."""
    from tests.support.tsql import parse_problems

    uri = fresh_database(pg_uri, "cf_docs_mssql_guide")
    _postgres_guide_tables(uri)
    logged = run_dbt_lines(block(*SQLSERVER_SH), uri, tmp_path, REPO / "examples/shop/oltp")
    assert len([m for m in logged if " created (" in m]) == 3, logged
    names = block(*SQLSERVER_NAMES).split()
    feed = names[0].split(":", 1)[1]
    assert names == [_long_name("state", feed), _long_name("changefeed_writer", feed)]
    for key in SQLSERVER_TSQL:
        assert parse_problems(block(*key)) == [], key


def test_others_spark_source_offset() -> None:
    from changefeed.spark.source import decode_offset

    cursors = decode_offset(block(*SPARK_SOURCE_OFFSET).strip())
    assert sorted(cursors) == [0, 3] and all(len(c) == 16 for c in cursors.values())


@pytest.mark.spark
def test_others_spark_udfs_guide(spark: Any, tmp_path: Path) -> None:
    """docs/spark-udfs.md: the Python sample on an `events` table, the strict-mode error
    text, and the macro sample built as a dbt-spark model."""
    from shop_demo._dbt import DbtProject, spark_session_output

    events = spark.createDataFrame([(bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"),)],
                                   "id binary")  # fmt: skip
    events.createOrReplaceTempView("events")
    namespace: dict[str, Any] = {"spark": spark, "events": events}
    exec(compile(block(*UDFS_PYTHON), "docs/spark-udfs.md", "exec"), namespace)

    from changefeed.spark.udfs import register

    register(spark, strict=True)
    try:
        with pytest.raises(Exception) as raised:
            spark.sql("select ulid_from_string('01ARZ3NDEKTSV4RRFFQ69G5FAU')").collect()
    finally:
        register(spark)
    expected = " ".join(block(*UDFS_STRICT_ERROR).split())
    assert expected.split(": ", 1)[1] in " ".join(str(raised.value).split())

    views = {"models": {"udf_docs": {"+materialized": "view"}}}
    project = _project_with(tmp_path, "udf_docs", views, {
        "models/events.sql": "select unhex('01563E3AB5D3D6764C61EFB99302BD5B') as event_id",
        "models/sample.sql": block(*UDFS_MACROS),
    })  # fmt: skip
    DbtProject(project, tmp_path / "work", "udf_docs", spark_session_output("cf_docs_udfs", 1)
               ).invoke(["run"])  # fmt: skip
    rows = spark.sql(
        "select event_id, date_format(created_at, 'yyyy-MM-dd HH:mm:ss.SSS') "
        "from cf_docs_udfs.sample"
    ).collect()
    assert [tuple(r) for r in rows] == [("01ARZ3NDEKTSV4RRFFQ69G5FAV", "2016-07-30 23:54:10.259")]


SPARK_CONSUMER = ("docs/spark.md", "14c33cd9a28e")
SPARK_FILTERING_CONSUMER = ("docs/spark.md", "ee0c6004a489")
SPARK_PUBLISHER = ("docs/spark.md", "738c913c7b81")
SPARK_SOURCES = ("docs/spark.md", "8b85ab02ecd5")
OTHERS.update({
    key: f"{HERE}::test_others_spark_guide_models"
    for key in (SPARK_CONSUMER, SPARK_FILTERING_CONSUMER, SPARK_PUBLISHER, SPARK_SOURCES)
})  # fmt: skip


@pytest.mark.spark
def test_others_spark_guide_models(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md's consumer, filtering consumer and publishing models, with its sources
    file, built twice by dbt-spark over a landed feed (the second run is incremental)."""
    from changefeed.spark.feedtable import write_batch
    from shop_demo._dbt import DbtProject, spark_session_output

    for table in ("landing.orders_feed", "shop.orders"):
        spark.sql(f"drop table if exists {table}")
    spark.sql("create database if not exists landing")
    spark.sql("create database if not exists shop")

    def land(rows: list[tuple[int, str, int, str]]) -> None:
        frame = spark.createDataFrame(
            [(s, bytes.fromhex(u), o, (o, st)) for s, u, o, st in rows],
            # as `changefeed land --payload` lands it: the source row is a struct
            "shard_id int, ulid binary, order_id bigint, "
            "payload struct<order_id: bigint, status: string>",
        )
        write_batch(spark, "landing.orders_feed", frame)

    spark.sql("create table shop.orders (order_id bigint, status string, amount decimal(12,2), "
              "updated_at timestamp, region int) using parquet")  # fmt: skip
    spark.sql("insert into shop.orders values (1, 'new', 10.00, timestamp'2026-01-01 10:00:00', 0),"
              " (2, 'new', 20.00, timestamp'2026-01-01 10:00:01', 1)")  # fmt: skip
    land([(0, "01" + "0" * 30, 1, "new"), (0, "02" + "0" * 30, 2, "cancelled")])
    consumer = "\n".join(block(*SPARK_CONSUMER).splitlines())
    config = {"models": {"spark_docs": {"+materialized": "incremental",
              "+incremental_strategy": "insert_overwrite", "+partition_by": ["changefeed_batch"],
              "+file_format": "parquet"}}}  # fmt: skip
    shop_source = {"version": 2, "sources": [{"name": "shop", "tables": [{"name": "orders"}]}]}
    project = _project_with(tmp_path, "spark_docs", config, {
        "models/orders_current.sql": consumer,
        "models/orders_open.sql": block(*SPARK_FILTERING_CONSUMER),
        "models/orders_published.sql": block(*SPARK_PUBLISHER),
        "models/sources.yml": "version: 2\n" + block(*SPARK_SOURCES),
        "models/shop_sources.yml": yaml.safe_dump(shop_source),
    })  # fmt: skip
    runner = DbtProject(project, tmp_path / "work", "spark_docs",
                        spark_session_output("cf_docs_spark_guide", 1))  # fmt: skip
    try:
        runner.invoke(["run"])
        land([(0, "03" + "0" * 30, 1, "shipped")])
        spark.sql("insert into shop.orders values "
                  "(1, 'shipped', 10.00, timestamp'2026-01-01 11:00:00', 0)")  # fmt: skip
        runner.invoke(["run"])

        def rows(query: str) -> list[tuple[Any, ...]]:
            return sorted(tuple(r) for r in spark.sql(query).collect())

        schema = "cf_docs_spark_guide"
        assert rows(f"select order_id, status, changefeed_batch from {schema}.orders_current") == [
            (1, "NEW", 1), (1, "SHIPPED", 2), (2, "CANCELLED", 1)]  # fmt: skip
        assert rows(f"select order_id, status, changefeed_batch from {schema}.orders_open") == [
            (1, "new", 1), (1, "shipped", 2)]  # fmt: skip
        published = rows(f"select shard_id, order_id, status, changefeed_batch "
                         f"from {schema}.orders_published")  # fmt: skip
        assert published == [(0, 1, "new", 1), (0, 1, "shipped", 2), (1, 2, "new", 1)]
    finally:
        for table in ("landing.orders_feed", "shop.orders"):
            spark.sql(f"drop table if exists {table}")


#: docs/spark.md's state models, run on parquet, Delta and Iceberg by the state-table tests.
OTHERS.update({("docs/spark.md", digest): "tests/test_spark_scd.py::project"
               for digest in ("dfee432117a3", "a84aa2979dd1")})  # fmt: skip

#: docs/spark.md's model without tombstones, the Delta current state of the deletes tests.
OTHERS[("docs/spark.md", "7d04dba9998f")] = "tests/test_spark_state_deletes.py::write_model"

#: docs/spark.md's re-processing command: its --vars are the range the re-processing tests run.
OTHERS[("docs/spark.md", "333f61cf54c9")] = "tests/test_spark_reprocess.py::documented_range"

TESTING_COMMANDS = ("docs/testing.md", "7c52784047e0")
OTHERS[TESTING_COMMANDS] = f"{HERE}::test_others_testing_commands_collect"


def test_others_testing_commands_collect() -> None:
    """docs/testing.md's commands run the fault suite, which `make test` runs anyway: here
    each one only has to select tests (the same command with --collect-only)."""
    for line in block(*TESTING_COMMANDS).splitlines():
        assert_pytest_command_selects_tests(line.split("#", 1)[0].strip())


def test_testing_tiers_are_make_targets_and_select_tests() -> None:
    """The tiers of docs/testing.md: each `make` line names a target of the Makefile whose
    pytest runs with the workers (test-fast: and without the slow tests; test-durations:
    recording the groups' seconds); each pytest line selects tests."""
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^WORKERS \?= 2$", makefile, re.M)  # two workers, as the page says
    recipes = {
        name: re.search(rf"^{name}: test-setup\n((?:\t.*\n)+)", makefile, re.M)
        for name in ("test", "test-fast", "test-durations")
    }
    assert all(recipes.values()), makefile
    assert_test_setup_does_everything(makefile)
    assert "pytest -n $(WORKERS)\n" in recipes["test"].group(1)
    assert 'pytest -n $(WORKERS) -m "not slow"\n' in recipes["test-fast"].group(1)
    recording = "CHANGEFEED_RECORD_DURATIONS=1 $(BIN)/python -m pytest -n $(WORKERS)\n"
    assert recording in recipes["test-durations"].group(1)
    for line in sample("testing-tiers").splitlines():
        command = line.split("#", 1)[0].strip()
        if command.startswith("make "):
            assert command.split()[1] in recipes, command
        else:
            assert_pytest_command_selects_tests(command)


def assert_pytest_command_selects_tests(command: str) -> None:
    """``.venv/bin/python -m pytest ...`` selects at least one test (run with --collect-only)."""
    words = shlex.split(command)
    assert words[:3] == [".venv/bin/python", "-m", "pytest"], command
    result = subprocess.run(
        [sys.executable, *words[1:], "--collect-only"], cwd=REPO, env=shell_env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"tests? collected", result.stdout), result.stdout[-500:]
