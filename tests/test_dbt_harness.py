"""The in-process dbt harness itself (tests/support/dbt_harness.py): what it changes in dbt
to keep many invocations in one process as fast as the first."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.postgres


def test_invocations_leave_the_default_behaviour_flags_as_they_were(dbt: Any) -> None:
    """dbt-adapters extends its module-level default flags in place each time an adapter is
    built; the harness's patch makes every invocation start from the same list."""
    from dbt.adapters.base.impl import DEFAULT_BASE_BEHAVIOR_FLAGS

    dbt.render("select 1", "postgres")
    before = [flag["name"] for flag in DEFAULT_BASE_BEHAVIOR_FLAGS]
    for _ in range(3):
        assert dbt.render("select {{ 40 + 2 }}", "postgres") == "select 42"
    assert [flag["name"] for flag in DEFAULT_BASE_BEHAVIOR_FLAGS] == before
    assert "postgres_skip_autocommit_transaction_statements" not in before
