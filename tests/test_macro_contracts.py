"""One contract per public macro: setup_feed, upgrade_feed and teardown_feed return exactly
the values their yml documents ("Returns, on every adapter, exactly one of: ..."), on
PostgreSQL (run for real, every path) and on SQL Server (the batches' own result values,
rendered for every case of the matrix, since no SQL Server runs here).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from tests.support import sqlserver_matrix as matrix
from tests.support.pg_feeds import create_table, relation

pytestmark = pytest.mark.postgres

FEEDS_YML = Path(__file__).resolve().parents[1] / "macros" / "feeds.yml"
CONTRACT = re.compile(r"Returns, on every adapter, exactly one of: (.*?)\.(?:\s|$)")


#: Macros of macros/feeds.yml whose return value is a structure, not one word: the test
#: that checks it exactly, and how feeds.yml names the structure.
STRUCTURED = {
    "apply_retention": ("tests/test_pg_retention.py", "a list"),
    "request_snapshot": ("tests/test_snapshot.py", "a mapping"),
}


def documented() -> dict[str, set[str]]:
    """{macro: its documented return values}, from macros/feeds.yml."""
    out: dict[str, set[str]] = {}
    for entry in yaml.safe_load(FEEDS_YML.read_text())["macros"]:
        if entry["name"] in STRUCTURED:
            text = " ".join(entry["description"].split())
            assert f"Returns, on PostgreSQL and SQL Server, {STRUCTURED[entry['name']][1]}" in text
            continue
        found = CONTRACT.search(" ".join(entry["description"].split()))
        assert found, f"macros/feeds.yml: {entry['name']} does not document its return values"
        out[entry["name"]] = set(re.findall(r"'([^']*)'", found.group(1)))
    return out


def test_every_feed_macro_documents_its_return_values() -> None:
    assert documented() == {
        "setup_feed": {"created", "updated", "repaired", "unchanged"},
        "upgrade_feed": {"upgraded"},
        "teardown_feed": {"dropped", "absent"},
        "feed_post_hook": {""},
    }


# -- PostgreSQL: every path, run -------------------------------------------------------------


def call(dbt: Any, operation: str, **args: Any) -> str:
    logged = dbt.run_operation(
        "cf_contract_call", {"operation": operation, **args}, target="postgres"
    )
    prefix = "cf_contract returned: "
    returned = [m.removeprefix(prefix) for m in logged if m.startswith(prefix)]
    assert len(returned) == 1, logged
    return str(returned[0])


def test_postgres_returns_exactly_the_documented_values(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    create_table(admin, "cf_contract", "orders", "order_id bigint primary key")
    rel = relation("cf_contract", "orders")
    call(dbt, "teardown_feed", relation=rel)
    seen: dict[str, list[str]] = {"setup_feed": [], "upgrade_feed": [], "teardown_feed": []}
    setup = {"relation": rel, "mode": "outbox", "capture": "trigger"}
    seen["setup_feed"].append(call(dbt, "setup_feed", **setup))  # new
    seen["setup_feed"].append(call(dbt, "setup_feed", **setup))  # the same again
    seen["setup_feed"].append(call(dbt, "setup_feed", **setup, stall_timeout_ms=4000))
    for name in ("capture_insert", "capture_update", "capture_delete"):
        trigger = admin.execute(
            "select tgname from pg_catalog.pg_trigger"
            " where tgrelid = 'cf_contract.orders'::regclass and tgname like %s", (f"%{name}%",)
        ).fetchone()  # fmt: skip
        assert trigger is not None, name
        admin.execute(f'drop trigger "{trigger[0]}" on cf_contract.orders')
    seen["setup_feed"].append(call(dbt, "setup_feed", **setup, stall_timeout_ms=4000))  # lost
    seen["upgrade_feed"].append(call(dbt, "upgrade_feed", **setup, stall_timeout_ms=4000))
    seen["teardown_feed"].append(call(dbt, "teardown_feed", relation=rel))
    seen["teardown_feed"].append(call(dbt, "teardown_feed", relation=rel))
    assert seen == {
        "setup_feed": ["created", "unchanged", "updated", "repaired"],
        "upgrade_feed": ["upgraded"],
        "teardown_feed": ["dropped", "absent"],
    }
    contract = documented()
    for macro, values in seen.items():
        assert set(values) == contract[macro], macro


# -- SQL Server: the values each batch can end with, rendered ------------------------------

BATCHES = {"setup_feed": "setup", "upgrade_feed": "upgrade", "teardown_feed": "teardown"}


def batch_results(batch: str) -> set[str]:
    """The values a batch's closing `select ... as action` can return: its own literals,
    and every literal assigned to @action when it selects that variable."""
    closing = [s for s in re.split(r";\s*\n", batch) if re.search(r"\bas action\s*$", s.strip())]
    assert len(closing) == 1, closing
    values = set(re.findall(r"N'([a-z]+)'", closing[0]))
    if "@action" in closing[0]:
        values |= set(re.findall(r"set @action = N'([a-z]+)'", batch))
    return values


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory, pg_uri: str) -> dict[str, dict[str, Any]]:
    return matrix.render_cases(matrix.macros_harness(tmp_path_factory, pg_uri), list(matrix.CASES))


def test_sqlserver_batches_end_with_exactly_the_documented_values(
    rendered: dict[str, dict[str, Any]],
) -> None:
    contract = documented()
    seen: dict[str, set[str]] = {macro: set() for macro in BATCHES}
    for case, out in rendered.items():
        for macro, section in BATCHES.items():
            values = batch_results(out[section])
            assert values <= contract[macro], f"{case}/{section}: {values - contract[macro]}"
            seen[macro] |= values
    # a blocking feed has no capture trigger to repair; across the matrix every value occurs
    assert seen == {macro: contract[macro] for macro in BATCHES}


def test_the_contract_check_sees_an_undocumented_value() -> None:
    """The check would catch a batch that still returned the old 'upgraded' from setup."""
    broken = (
        "set @action = N'created';\nset @action = N'upgraded';\nset @action = N'unchanged';\n"
        "select @action as action;\n"
    )
    assert batch_results(broken) == {"created", "upgraded", "unchanged"}
    assert batch_results(broken) != documented()["setup_feed"]
