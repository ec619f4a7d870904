"""Whether Spark's Python workers can import the UDF bodies, checked on the driver.

The UDFs are pickled by reference to :mod:`changefeed.spark.udfs._batch`, so every Python
worker imports changefeed. Workers run ``spark.pyspark.python`` / ``PYSPARK_PYTHON``, by
default ``python3`` on PATH: a script run as ``.venv/bin/python script.py`` without the venv
activated starts workers from another Python, and every task fails with a bare
``No module named 'changefeed.spark'`` deep in an executor's stack trace.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys


def check_local_workers() -> None:
    """In local mode (workers on this machine), raise :class:`ImportError` naming the fix
    when the workers' Python cannot import changefeed. On a cluster nothing is checked:
    the executors' Python is not reachable from here (docs/spark-udfs.md)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - make_udf needs pyspark first anyway
        return
    context = SparkContext._active_spark_context
    if context is None or not str(context.master).startswith("local"):
        return
    problem = workers_import_problem(str(context.pythonExec))
    if problem is not None:
        raise ImportError(problem)


@functools.cache
def workers_import_problem(python: str) -> str | None:
    """Why ``python`` cannot import the UDF bodies, with the fix; None when it can."""
    found = shutil.which(python) or python
    if os.path.realpath(found) == os.path.realpath(sys.executable):
        return None
    try:
        result = subprocess.run(
            [found, "-c", "import changefeed.spark.udfs._batch"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except OSError as exc:
        failure = str(exc)
    else:
        if result.returncode == 0:
            return None
        lines = result.stderr.strip().splitlines()
        failure = lines[-1] if lines else f"exit code {result.returncode}"
    return (
        f"Spark's Python workers run {python} ({found}), which cannot import changefeed "
        f"({failure}), so every ULID UDF would fail on the executors. Start Spark with "
        f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python), activate the venv "
        f"before running the script, or install changefeed[spark] for {found}"
    )
