"""``make demo`` end to end, twice: the second run must continue where the first stopped.

Small scale (a few seconds of load, landed continuously, dbt only at the end), each run
in a process of its own like ``make demo``: the embedded PostgreSQL keeps its data and the Spark
metastore its tables in the state directory between the two processes.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.doc_blocks import in_this_checkout, sample
from tests.support.real_parts import unavailable

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres]


def _require_parts() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark", "Java was not found (install a JDK 17+ or set JAVA_HOME)")
    for module, what in (("pgserver", "PostgreSQL"), ("pyspark", "Spark"),
                         ("dbt.adapters.spark", "dbt-spark"),
                         ("dbt.adapters.postgres", "dbt-postgres")):  # fmt: skip
        try:
            __import__(module)
        except ImportError as exc:
            unavailable(what, str(exc))


def demo_env() -> dict[str, str]:
    """This checkout's package and demo (the demo is not installed with the package)."""
    return dict(os.environ, PYTHONPATH=f"{REPO / 'python'}:{REPO / 'examples' / 'shop'}")


def run_demo(state: Path, seed: int) -> subprocess.CompletedProcess[str]:
    env = demo_env()
    return subprocess.run(
        [sys.executable, "-m", "shop_demo", "--state-dir", str(state),
         "--duration", "4", "--rate", "20", "--writers", "4", "--cycle", "600",
         "--seed", str(seed)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def _check_run(result: subprocess.CompletedProcess[str], state: Path) -> dict[str, Any]:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "exactly-once check: PASSED" in result.stdout, output[-4000:]
    assert "lag at the end: 0 events behind" in result.stdout
    # Progress: a stamped line at least every ~5 s, never a silent pause.
    stamps = [int(m.group(1)) for m in re.finditer(r"^\[\s*(\d+)s\]", result.stdout, re.M)]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert stamps and max(gaps, default=0) <= 12, gaps
    chart = Path(re.search(r"^chart: (.+)$", result.stdout, re.M).group(1))  # type: ignore[union-attr]
    assert chart == state / "report.html"
    page = chart.read_text()
    assert page.count("<svg") == 2 and "Throughput" in page and "Latency" in page
    assert "committed -&gt; landed in Spark, median of the batch" in page
    # The continuous landing's latency, per feed: measured, positive and ordered (not the
    # benchmark's bar: a loaded CI machine lands slower than docs/performance.md's).
    for feed in ("shop.orders", "shop.payments"):
        found = re.search(
            rf"^  {re.escape(feed)} +p50 ([\d.]+) s, p99 ([\d.]+) s, max ([\d.]+) s "
            r"\(([\d,]+) events\)$",
            result.stdout,
            re.M,
        )
        assert found, (feed, output[-4000:])
        p50, p99, worst = (float(found.group(i)) for i in (1, 2, 3))
        assert 0 < p50 <= p99 <= worst < 300, (feed, p50, p99, worst)
        assert int(found.group(4).replace(",", "")) > 0
    runs: list[dict[str, Any]] = json.loads((state / "runs.json").read_text())
    return runs[-1]


@pytest.mark.timeout(2000)
def test_demo_twice_exactly_once_and_incremental(tmp_path: Path) -> None:
    _require_parts()
    state = tmp_path / "state"

    first_result = run_demo(state, seed=1)
    first = _check_run(first_result, state)
    assert first["run"] == 1 and first["check"] == "passed"
    assert sum(first["written"].values()) > 0
    assert first["totals"]["landed"] == first["totals"]["committed"] == first["totals"]["consumed"]

    second_result = run_demo(state, seed=2)
    second = _check_run(second_result, state)
    assert "continuing from run 1" in second_result.stdout
    assert second["run"] == 2 and second["check"] == "passed"
    written = sum(second["written"].values())
    assert written > 0
    # It continued: the totals grew by exactly this run's events (nothing re-landed, nothing
    # lost), and every feed's new batches come after the first run's.
    assert second["totals"]["committed"] == first["totals"]["committed"] + written
    assert second["totals"]["landed"] == second["totals"]["committed"]
    assert second["totals"]["consumed"] == second["totals"]["committed"]
    for feed, batches in second["batches"].items():
        assert batches, f"{feed}: the second run landed nothing"
        assert min(batches) > max(first["batches"][feed]), (feed, first["batches"], batches)
    assert (state / "report-run-1.html").exists() and (state / "report-run-2.html").exists()

    # README: the summary has the documented form, and the demo's status entry shows the
    # demo's feeds, and every consumer caught up (lag 0).
    summary = second_result.stdout[second_result.stdout.index("== changefeed demo: summary"):]
    assert _shape(summary) == _shape(sample("readme-demo-summary"))
    status = subprocess.run(
        ["bash", "-c", in_this_checkout(sample("readme-status"))], cwd=REPO,
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, CHANGEFEED_DEMO_DIR=str(state)),
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    for feed, mode in (("shop.orders", "blocking"), ("shop.payments", "outbox")):
        assert sum(line.split()[:2] == [feed, mode] for line in lines) == 4  # 4 shards
    consumers = [line.split() for line in lines if line.startswith(("shop_landing.", "shop_anal"))]
    assert len(consumers) == 16 and all(c[4] == "0" for c in consumers), status.stdout


def _shape(text: str) -> list[str]:
    """A summary with its numbers, batch ranges and paths replaced (they differ per run)."""
    shaped = []
    for line in text.strip().splitlines():
        line = re.sub(r"^chart: .*$", "chart: PATH", line)
        line = re.sub(r"\d[\d,.]*", "N", line)
        line = re.sub(r"N-N", "N", line)
        shaped.append(" ".join(line.split()))
    return shaped


def test_demo_status_without_a_demo_names_the_fix(tmp_path: Path) -> None:
    """``make demo-status`` before any ``make demo``: one line saying what to run."""
    result = subprocess.run(
        [sys.executable, "-m", "shop_demo", "status", "--state-dir", str(tmp_path / "none")],
        cwd=REPO, env=demo_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert "there is no demo database" in result.stderr and "make demo" in result.stderr
    assert "Traceback" not in result.stderr
