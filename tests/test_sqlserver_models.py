"""Feeds on dbt models, SQL Server side (rendered; no SQL Server runs here): the statement
that gives a model's new feed an event for every row its table has is the capture trigger's
own insert over the whole source table, for every capture case of the render matrix,
hostile names included, and it parses as T-SQL. tests/test_pg_feed_models.py runs the same
rules for real on PostgreSQL.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests import sqlserver_matrix as matrix
from tests.dbtkit import DbtHarness
from tests.sqlserver_tsql import parse_problems

pytestmark = pytest.mark.postgres

CAPTURE_CASES = [name for name, case in matrix.CASES.items() if case.get("capture") == "trigger"]


@pytest.fixture(scope="module")
def dbt(tmp_path_factory: pytest.TempPathFactory, pg_uri: str) -> DbtHarness:
    return matrix.macros_harness(tmp_path_factory, pg_uri)


def test_a_models_new_feed_is_seeded_by_the_triggers_own_insert_over_the_table(
    dbt: DbtHarness,
) -> None:
    snippets: list[str] = []
    for name in CAPTURE_CASES:
        ctx = "changefeed._sqlserver_feed_context(" + matrix.jinja_spec(matrix.CASES[name]) + ")"
        snippets += [
            "{% set c = " + ctx + " %}{{ changefeed._sqlserver_sql_seed(c) }}",
            "{% set c = " + ctx + " %}{{ changefeed._sqlserver_capture_insert("
            "c, [('inserted', 'i'), ('deleted', 'd')]) }}",
            "{% set c = " + ctx + " %}{{ c.source_sql }}",
        ]
    rendered = dbt.render_many(snippets, "postgres")
    assert CAPTURE_CASES, "the matrix has capture: trigger cases"
    for index, name in enumerate(CAPTURE_CASES):
        seed, trigger_insert, source = rendered[3 * index : 3 * index + 3]
        assert parse_problems(seed) == [], name
        head, _, selects = trigger_insert.partition("\n    select ")
        # the same insert target, shard expression and key columns as the trigger's insert
        # of new rows, over the table itself
        first_select = "select " + selects.split("\n    union\n")[0].strip()
        expected = re.sub(r"(?<=[ ,])i\.\[", "s.[", first_select)
        expected = expected.replace(" from inserted as i", f" from {source} as s")
        assert seed.strip() == f"set nocount on;\n{head}\n    {expected};", name


def test_the_model_rules_apply_before_any_sql_server_code(dbt: Any) -> None:
    """feed_post_hook's rules live in macros/_feed and run for every adapter: a table model
    is refused before sqlserver__setup_feed looks at the database."""
    from tests.dbtkit import DbtError

    snippet = (
        "{{ changefeed._feed_build_spec('shop.orders', {'mode': 'outbox', 'capture': 'trigger'},"
        " changefeed._sqlserver_key_columns,"
        " {'name': 'orders', 'materialization': 'table', 'full_refresh': false}) }}"
    )
    with pytest.raises(DbtError, match="is materialized as 'table', which dbt rebuilds"):
        dbt.render(snippet, "postgres")
