"""``make demo``: the shop example end to end (examples/shop).

An embedded PostgreSQL plays the shop's OLTP database. dbt-postgres
(examples/shop/oltp) creates its ``orders`` and ``payments`` tables and their feeds
(orders in blocking mode, payments in outbox mode). Writer threads run concurrent
transactions on several shards, some long and some rolled back, while Spark lands both
feeds continuously (:func:`changefeed.spark.landing.land_continuously`) and dbt-spark
(examples/shop/analytics) builds incremental models on them. After a read barrier on
every shard, a final landing run and dbt run, the exactly-once check compares Spark with
the committed events recorded in PostgreSQL, and the summary shows each feed's latency
from an event's commit to its landing.

State lives in ``.demo/`` (PostgreSQL data, Spark warehouse and metastore, dbt dirs,
the report), so a second run continues where the first stopped::

    python -m shop_demo                       # what `make demo` runs
    python -m shop_demo --duration 20 --rate 20
    python -m shop_demo --reset               # start over
    python -m shop_demo status                # `changefeed status` on the demo's feeds

Run from the repository root with ``PYTHONPATH=examples/shop`` (what ``make demo`` and
``make demo-status`` do): the demo is an example, not part of the installed package.

Environment: ``CHANGEFEED_DEMO_DIR`` (state directory), ``CHANGEFEED_DEMO_DURATION``,
``CHANGEFEED_DEMO_RATE``, ``CHANGEFEED_DEMO_CYCLE`` (defaults of the options).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from shop_demo._errors import DemoError
from shop_demo._layout import DemoLayout, default_state_dir
from shop_demo._run import Demo, DemoOptions

__all__ = ["Demo", "DemoError", "DemoLayout", "DemoOptions", "default_state_dir", "main"]


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise DemoError(f"{name}={raw!r} is not a number") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shop_demo",
        description="The shop example end to end: PostgreSQL feeds -> Spark -> dbt models, "
        "with an exactly-once check. A second run continues where the first stopped. "
        "`python -m shop_demo status` shows the feeds and the consumers' lag.",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the demo keeps its state (default: .demo in the "
        "repository, or CHANGEFEED_DEMO_DIR)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of load (default 60, or CHANGEFEED_DEMO_DURATION)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="transactions per second, all writers together (default 40, or CHANGEFEED_DEMO_RATE)",
    )
    parser.add_argument(
        "--cycle",
        type=float,
        default=None,
        help="seconds between dbt runs while the load runs; the landing is continuous "
        "(default 15, or CHANGEFEED_DEMO_CYCLE)",
    )
    parser.add_argument("--writers", type=int, default=6, help="writer threads (default 6)")
    parser.add_argument("--shards", type=int, default=4, help="shards per feed (default 4)")
    parser.add_argument("--seed", type=int, default=None, help="random seed of the load")
    parser.add_argument(
        "--reset", action="store_true", help="delete the state directory first and start over"
    )
    return parser


def options_from_args(args: argparse.Namespace) -> DemoOptions:
    duration = (
        args.duration if args.duration is not None else _env_float("CHANGEFEED_DEMO_DURATION", 60.0)
    )
    rate = args.rate if args.rate is not None else _env_float("CHANGEFEED_DEMO_RATE", 40.0)
    cycle = args.cycle if args.cycle is not None else _env_float("CHANGEFEED_DEMO_CYCLE", 15.0)
    for name, value in (
        ("--duration", duration),
        ("--rate", rate),
        ("--cycle", cycle),
        ("--writers", args.writers),
        ("--shards", args.shards),
    ):
        if value <= 0:
            raise DemoError(f"{name} must be positive, got {value:g}")
    return DemoOptions(
        state_dir=(args.state_dir.resolve() if args.state_dir else default_state_dir()),
        duration=duration,
        rate=rate,
        writers=args.writers,
        shards=args.shards,
        cycle=cycle,
        seed=args.seed,
        reset=args.reset,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit code (0: check passed, 1: failed or error)."""
    # While Spark starts, descriptors 1 and 2 point at Spark's log (the JVM inherits
    # them): errors go to a duplicate of the real stderr taken now.
    stderr = _own_stream(sys.stderr)
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments[:1] == ["status"]:
            from shop_demo._status import status_main

            return status_main(arguments[1:])
        options = options_from_args(build_parser().parse_args(arguments))
        return Demo(options).run()
    except DemoError as exc:
        print(f"changefeed demo: error: {exc}", file=stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("changefeed demo: interrupted; `make demo` continues from here", file=stderr)
        return 130


def _own_stream(stream: TextIO) -> TextIO:
    try:
        stream.flush()
        return open(os.dup(stream.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError):  # no real file descriptor (e.g. captured)
        return stream
