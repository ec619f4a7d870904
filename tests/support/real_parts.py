"""Real parts or nothing: a test that needs PostgreSQL, Spark, Delta or Iceberg and cannot
have it is skipped with the reason on a developer machine, and fails when ``CI=true``.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(what: str, why: str) -> NoReturn:
    """Skip locally, fail in CI: a missing real part must never pass silently there."""
    message = f"{what} is unavailable: {why}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true, so this is a failure, not a skip)", pytrace=False)
    pytest.skip(message)
