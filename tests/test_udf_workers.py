"""The UDFs' check of Spark's local Python workers (no Spark started): a worker Python that
cannot import changefeed is named with the fix before any task fails on an executor."""

from __future__ import annotations

import sys
from pathlib import Path

from changefeed.spark.udfs._workers import workers_import_problem


def test_the_drivers_own_python_needs_no_check() -> None:
    assert workers_import_problem(sys.executable) is None


def test_a_python_without_changefeed_is_named_with_the_fix(tmp_path: Path) -> None:
    # -I -S: no PYTHONPATH and no site-packages, as a system python3 outside the venv.
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    python.chmod(0o755)
    problem = workers_import_problem(str(python))
    assert problem is not None
    assert "No module named 'changefeed'" in problem
    assert f"PYSPARK_PYTHON={sys.executable}" in problem


def test_another_python_that_has_changefeed_passes(tmp_path: Path) -> None:
    python = tmp_path / "python-venv"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    assert workers_import_problem(str(python)) is None
