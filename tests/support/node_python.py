"""The Python of a cluster's nodes as docs/deploying.md ("Shipping the package") installs
it: a virtual environment holding the project's wheel with its ``postgres`` extra and
nothing else, PySpark included (the cluster brings PySpark to its Python workers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def node_python(workdir: Path) -> str:
    """Build the wheel (``make wheel``'s command) and install it with its ``postgres``
    extra into a new environment under ``workdir``; that environment's interpreter."""
    uv = str(Path(sys.executable).parent / "uv")
    dist, venv = workdir / "dist", workdir / "node-venv"

    def run(*args: str) -> None:
        done = subprocess.run([uv, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"uv {args}: {done.stderr[-2000:]}"

    run("build", "--quiet", "--wheel", "--out-dir", str(dist), str(REPO))
    (wheel,) = dist.glob("*.whl")
    run("venv", "--quiet", "--python", sys.executable, str(venv))
    python = str(venv / "bin" / "python")
    run("pip", "install", "--quiet", "--python", python,
        f"changefeed[postgres] @ {wheel.as_uri()}")  # fmt: skip
    return python
