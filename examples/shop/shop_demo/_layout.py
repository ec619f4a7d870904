"""Where the demo keeps its state, and what it names things.

Everything lives under one state directory (``.demo/`` in the repository by default),
so a second ``make demo`` finds the first run's database, Spark tables and dbt state
and continues from there. Deleting the directory (or ``--reset``) starts over.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The shop example (this package's parent directory) and the repository holding it.
EXAMPLE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = EXAMPLE_DIR.parents[1]

#: Feed id -> (mode, landed Spark table, key column).
FEEDS: dict[str, tuple[str, str, str]] = {
    "shop.orders": ("blocking", "shop_landing.orders_feed", "order_id"),
    "shop.payments": ("outbox", "shop_landing.payments_feed", "payment_id"),
}

#: Spark consumer outputs (dbt models of examples/shop/analytics) -> the feed they read.
CONSUMERS: dict[str, str] = {
    "shop_analytics.order_updates": "shop.orders",
    "shop_analytics.payments_hourly": "shop.payments",
}

ANALYTICS_SCHEMA = "shop_analytics"


def default_state_dir() -> Path:
    """``$CHANGEFEED_DEMO_DIR``, else ``.demo`` in the repository (or the current directory)."""
    configured = os.environ.get("CHANGEFEED_DEMO_DIR")
    if configured:
        return Path(configured).resolve()
    base = REPO_ROOT if (REPO_ROOT / "examples" / "shop").is_dir() else Path.cwd()
    return (base / ".demo").resolve()


@dataclass(frozen=True)
class DemoLayout:
    """The paths inside one demo state directory.

    >>> layout = DemoLayout(Path("/tmp/x"))
    >>> str(layout.pg_dir), str(layout.warehouse_dir)
    ('/tmp/x/pg', '/tmp/x/spark-warehouse')
    """

    root: Path

    @property
    def pg_dir(self) -> Path:
        return self.root / "pg"

    @property
    def warehouse_dir(self) -> Path:
        return self.root / "spark-warehouse"

    @property
    def dbt_dir(self) -> Path:
        return self.root / "dbt"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def runs_file(self) -> Path:
        return self.root / "runs.json"

    @property
    def chart_file(self) -> Path:
        return self.root / "report.html"

    def run_chart_file(self, run: int) -> Path:
        return self.root / f"report-run-{run}.html"
