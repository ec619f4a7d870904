"""The scratch folder of one benchmark run: a fresh temporary directory, removed when the
process exits (warehouses of millions of rows would otherwise fill ``/tmp`` run by run)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new directory named ``<prefix>*`` under the system's temporary folder, deleted
    (with everything in it) at interpreter exit, after a normal end or an exception."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
