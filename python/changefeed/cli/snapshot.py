"""``changefeed snapshot``: request a snapshot of a feed's source and land it, to its end.

    changefeed snapshot --connection 'postgresql://app@/shop?host=/var/run/postgresql' \\
        --feed shop.orders --table landing.orders_feed
    changefeed snapshot ... --key-from 1000 --key-to 1999     # a key range (inclusive)
    changefeed snapshot ... --pending-only                      # finish a killed snapshot
    changefeed snapshot --connection ... --feed shop.orders --cancel 7   # no landing runs it

The request (``snapshot_begin``, docs/protocol.md section 12) reserves the snapshot's ULIDs
in the database; then the landing of ``--table`` lands the events before it, reads the
source in primary-key chunks (one Spark task each, ``--chunk-rows`` rows), and goes on with
the live events, with a progress line per batch (rows done, rows/s, time left). A snapshot
that was killed is resumed by the next landing of the table (this command with
``--pending-only``, or ``changefeed land``) from its last committed chunk. Spark starts as
for ``changefeed land``, before the request: every argument and the target table are
checked first, so a refused command records nothing. ``--cancel`` marks a pending request
finished with 0 rows, with no Spark (a request that cannot run is logged by every landing
with this command). Exit code 0 when every pending snapshot has finished, 1 on an error.
"""

from __future__ import annotations

import argparse
from typing import Any

from changefeed.cli import CliError, first_line, spark_missing
from changefeed.cli.land import (
    add_source_arguments,
    source_options,
    start_spark,
)
from changefeed.cli.local_spark import add_spark_arguments
from changefeed.client import redact


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="snapshot a feed's source table into its landed table (backfill)",
        description="Request a snapshot of the feed's source (the whole table or a key "
        "range) and land it: every existing row becomes an event, while writers keep writing.",
    )
    add_source_arguments(parser, payload=False, table_required=False)
    parser.add_argument("--shard", type=int, default=0,
                        help="the shard the snapshot's keys are written in (default 0); "
                        "with capture: trigger and a shard expression, the rows it puts "
                        "there")  # fmt: skip
    parser.add_argument("--key-from",
                        help="the first key of the range (inclusive): a value for a "
                        "one-column key, else a JSON array such as '[1, \"a\"]' (default: "
                        "the first)")  # fmt: skip
    parser.add_argument("--key-to", help="the last key of the range (inclusive), same form")
    parser.add_argument("--chunk-rows", type=int, default=1_000_000,
                        help="source rows per chunk, one Spark task each (default "
                        "1000000)")  # fmt: skip
    parser.add_argument("--pending-only", action="store_true",
                        help="request nothing: land the snapshots already requested (a killed "
                        "one resumes from its last committed chunk)")  # fmt: skip
    parser.add_argument("--cancel", type=int, metavar="SNAPSHOT_ID",
                        help="cancel this pending request (no landing executes it any more; "
                        "rows it landed stay) and land nothing")  # fmt: skip
    add_spark_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        from changefeed.spark.landing import (
            Landing,
            cancel_snapshot,
            check_source,
            request_snapshot,
        )
        from changefeed.spark.source import ChangefeedSourceError
    except ImportError as exc:
        raise spark_missing("a snapshot", exc) from None
    if args.cancel is not None:
        return _cancel(args, cancel_snapshot, ChangefeedSourceError)
    if not args.table:
        raise CliError("--table is required: the landed table the snapshot lands into")
    if not 1 <= args.chunk_rows < 2**24:
        raise CliError(f"--chunk-rows must be from 1 to 16777215 (2^24 - 1), got {args.chunk_rows}")
    if args.pending_only and (args.key_from or args.key_to):
        raise CliError("--pending-only requests nothing: leave out --key-from and --key-to")
    options = source_options(args)
    try:
        check_source(options, args.table)
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None
    spark = start_spark(args)
    try:
        landing = Landing(spark, options, args.table, table_format=args.table_format,
                          snapshot_chunk_rows=args.chunk_rows)  # fmt: skip
        try:
            # The table before the request: a request for a table the landing refuses
            # would stay pending for the feed's other landings (protocol 12.1).
            landing.check_target()
            if not args.pending_only:
                request = request_snapshot(
                    options, shard=args.shard, key_from=args.key_from, key_to=args.key_to
                )
                print(
                    f"changefeed snapshot: requested snapshot {request.snapshot_id} of "
                    f"{args.feed} shard {request.shard}",
                    flush=True,
                )
            result = landing.run(on_progress=lambda p: print(p.line(), flush=True))
        finally:
            landing.close()
        print(result.summary(), flush=True)
        return 0
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:
        raise CliError(f"{type(exc).__name__}: {redact(first_line(exc))}") from None


def _cancel(args: argparse.Namespace, cancel: Any, error: type[Exception]) -> int:
    if args.pending_only or args.key_from or args.key_to:
        raise CliError("--cancel lands nothing: leave out --pending-only, --key-from and --key-to")
    try:
        done = cancel(source_options(args), args.cancel)
    except error as exc:
        raise CliError(str(exc)) from None
    print(
        f"changefeed snapshot: cancelled snapshot {done.snapshot_id} of {args.feed} shard "
        f"{done.shard}; no landing executes it any more",
        flush=True,
    )
    return 0
