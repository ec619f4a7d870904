"""Running the ``changefeed`` command in a subprocess, for the CLI and layout tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "python"

#: Runs the CLI with ``import pyspark`` failing, as on an install without the spark extra.
WITHOUT_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; "
    "from changefeed.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_without_pyspark(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK, *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
