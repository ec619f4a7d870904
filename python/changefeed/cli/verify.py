"""``changefeed verify``: prove that a current-state model equals its source table.

    changefeed verify --connection 'postgresql://app@/shop?host=/var/run/postgresql' \\
        --feed shop.orders --table landing.orders_feed --model analytics.orders_state

Reads the feed's source table now (in primary-key chunks, one Spark task each, without
blocking writers) and the model's live rows, joins them on the key and prints what it
found: equal keys, keys in flight (written after the model's position: its next ``dbt
run`` applies them), and every other differing key (changed, missing from the model,
extra in it, held twice by it), the first ``--max-keys`` with both sides' values. Spark
starts as for ``changefeed land``. The comparison's rules: docs/spark.md "Verifying a
state model" and docs/protocol.md section 13.

Exit code 0 when the model equals the source (keys in flight are not differences), 4
(:data:`EXIT_DIFFERENT`) when a key differs, 1 on an error (the message names the cause
and the fix), for CI and monitoring.
"""

from __future__ import annotations

import argparse
from typing import Any

from changefeed.cli import EXIT_DIFFERENT, CliError, first_line, spark_missing
from changefeed.cli.land import add_feed_arguments, feed_options, start_spark
from changefeed.cli.local_spark import add_spark_arguments
from changefeed.client import redact


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="compare a feed's source table with a current-state model",
        description="Compare the feed's source table, read now, with a changefeed_current_state "
        "or changefeed_history model of its landed table: every key equal or in flight, or "
        "exit code 4 with the differing keys.",
    )
    add_feed_arguments(parser)
    parser.add_argument("--table", required=True,
                        help="the landed table the model consumes (changefeed land --table), "
                        "as Spark names it")  # fmt: skip
    parser.add_argument("--model", required=True,
                        help="the state model's table as Spark names it: database.table, or "
                        "catalog.database.table in an Iceberg catalog")  # fmt: skip
    parser.add_argument("--max-keys", type=int, default=20,
                        help="differing keys listed with both sides' values (default 20; "
                        "the counts cover all)")  # fmt: skip
    parser.add_argument("--chunk-rows", type=int, default=1_000_000,
                        help="source rows per chunk, one Spark task each (default 1000000)")
    parser.add_argument("--barrier-timeout", type=float, default=60.0,
                        help="seconds the read barrier may wait for a pending write on each "
                        "shard (default 60)")  # fmt: skip
    add_spark_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        from changefeed.spark.landing import check_source
        from changefeed.spark.verify import verify
    except ImportError as exc:
        raise spark_missing("verify", exc) from None
    from changefeed.errors import ChangefeedError

    if args.max_keys < 0:
        raise CliError(f"--max-keys must be 0 or more, got {args.max_keys}")
    if not 1 <= args.chunk_rows < 2**24:
        raise CliError(f"--chunk-rows must be from 1 to 16777215 (2^24 - 1), got {args.chunk_rows}")
    if args.barrier_timeout <= 0:
        raise CliError(f"--barrier-timeout must be positive, got {args.barrier_timeout:g}")
    options = feed_options(args)
    try:
        check_source({**options, "payload": "true"})  # a typo fails before Spark starts
    except ChangefeedError as exc:
        raise CliError(str(exc)) from None
    spark = start_spark(args)
    try:
        result = verify(
            spark, options, args.model, args.table, max_keys=args.max_keys,
            chunk_rows=args.chunk_rows, barrier_timeout=args.barrier_timeout,
        )  # fmt: skip
    except ChangefeedError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:
        raise CliError(f"{type(exc).__name__}: {redact(first_line(exc))}") from None
    for line in result.lines():
        print(line, flush=True)
    return 0 if result.ok else EXIT_DIFFERENT
