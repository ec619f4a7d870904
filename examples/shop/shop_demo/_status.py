"""``python -m shop_demo status`` (``make demo-status``): ``changefeed status`` on the demo.

Starts the demo's embedded PostgreSQL if it is not running, prints the exact
``changefeed status`` command line for the demo's database, warehouse and consumers, and
runs it. The demo uses the CLI; the CLI knows nothing of the demo.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

from shop_demo._errors import DemoError
from shop_demo._layout import CONSUMERS, FEEDS, DemoLayout, default_state_dir


def status_arguments(uri: str, layout: DemoLayout, spark: bool) -> list[str]:
    """The ``changefeed status`` arguments for the demo: its feeds and, with ``spark``,
    its landed tables and consumer models (read from its warehouse).

    >>> status_arguments("postgresql://db/shop", DemoLayout(Path("/s")), spark=False)
    ['status', '--connection', 'postgresql://db/shop']
    """
    args = ["status", "--connection", uri]
    if spark:
        args += ["--warehouse", str(layout.warehouse_dir)]
        args += [f"--consumer={feed}={table}" for feed, (_m, table, _k) in FEEDS.items()]
        args += [f"--consumer={feed}={table}" for table, feed in CONSUMERS.items()]
    return args


def status_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shop_demo status",
        description="`changefeed status` on the demo's database (starting its embedded "
        "server if needed) and its Spark tables.",
    )
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="the demo's state directory (default: .demo, or "
                        "CHANGEFEED_DEMO_DIR)")  # fmt: skip
    parser.add_argument("--no-spark", action="store_true",
                        help="do not start Spark for the consumers' lag")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    layout = DemoLayout(args.state_dir.resolve() if args.state_dir else default_state_dir())
    if not (layout.pg_dir / "PG_VERSION").exists():
        raise DemoError(
            f"there is no demo database in {layout.pg_dir}: run `make demo` first (or pass "
            "the demo's state directory: --state-dir DIR)"
        )
    from changefeed.cli import main as changefeed_main
    from shop_demo._run import start_postgres

    uri, _server = start_postgres(layout)  # stops when this process exits
    command = status_arguments(uri, layout, spark=not args.no_spark)
    if args.json:
        command.append("--json")
    print("$ changefeed " + shlex.join(command), flush=True)
    return changefeed_main(command)
