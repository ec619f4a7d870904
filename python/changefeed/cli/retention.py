"""``changefeed retention``: remove a feed's old events by a policy.

    changefeed retention --connection 'postgresql://owner@db/shop' --feed shop.orders \\
        --max-age 7d [--keep-last 100000] [--shard 0] [--override-consumers]
    changefeed retention --spark-table landing.orders_feed --max-age 7d \\
        --consumer analytics.orders_current [--consumer ...] [--warehouse spark-warehouse]

A database feed (PostgreSQL, SQL Server): an event is removed when it lies at or below
its shard's safe point and no rule keeps it: ``--max-age`` keeps events younger than the
age (by their ULID's time), ``--keep-last`` keeps the newest N events of each shard (whole
transactions), and every registered consumer's cursor keeps the events after it unless
``--override-consumers`` is given (docs/protocol.md section 8.1). A reader whose cursor
lies below the removed events then fails with CF013 (SQL Server: error 51062; fell
behind retention) and must re-snapshot. Prints one line per shard. Runs as the feed's
owner (the reader and writer roles may not remove events).

A Spark feed table (``--spark-table``: a landed feed, or a dbt-spark published one;
docs/protocol.md 11.7) loses whole batches, oldest first, never a shard's newest batch,
by the same two rules (``--keep-last``: the batches holding each shard's newest N events).
Its consumers register nothing: each keeps its cursor in its own output table, so the
command is told the output table of every consumer (``--consumer``, repeatable), or
``--no-consumers`` when the feed has none, and never removes a batch a listed consumer
has not read unless ``--override-consumers``. It starts Spark like ``changefeed land``
(``--spark``, ``--warehouse``, ``--conf``) and prints one line for the table.

Exit code 0, or 1 with one line naming the cause and the fix.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from changefeed.cli import CliError
from changefeed.cli.feeds import add_connection_arguments, connect
from changefeed.cli.local_spark import add_spark_arguments
from changefeed.cli.retention_policy import check_policy
from changefeed.cli.spark_retention import run_spark
from changefeed.errors import ChangefeedError
from changefeed.ulid import encode_one, timestamp_one


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "retention",
        help="remove a feed's old events, never past a registered consumer",
        description="Remove a feed's events older than --max-age and/or beyond the newest "
        "--keep-last of each shard, never past a consumer's cursor unless "
        "--override-consumers: of a PostgreSQL or SQL Server feed (--connection, --feed; "
        "its registered consumers), or of a Spark feed table (--spark-table; the consumers "
        "given by --consumer).",
    )
    add_connection_arguments(parser)
    parser.add_argument("--feed", help="the feed: schema.table of the source")
    parser.add_argument(
        "--spark-table",
        metavar="TABLE",
        help="instead of --connection and --feed: a Spark feed table (schema.table: a "
        "landed feed or a dbt-spark published one); removes whole batches",
    )
    parser.add_argument(
        "--consumer",
        action="append",
        default=[],
        metavar="TABLE",
        help="--spark-table: the output table of a consumer of the feed (repeatable; list "
        "every one: retention keeps what they have not read)",
    )
    parser.add_argument(
        "--no-consumers",
        action="store_true",
        help="--spark-table: the feed has no consumer to keep events for",
    )
    parser.add_argument(
        "--max-age",
        metavar="AGE",
        help="remove events older than this: a number with s, m, h or d (e.g. 7d, 36h; "
        "plain seconds without a unit)",
    )
    parser.add_argument(
        "--keep-last",
        type=int,
        metavar="N",
        help="keep the newest N events of each shard (their transactions whole)",
    )
    parser.add_argument("--shard", type=int, help="only this shard (default: every shard)")
    parser.add_argument(
        "--override-consumers",
        action="store_true",
        help="remove events that registered consumers have not read yet (they will fail "
        "with 'fell behind retention' and must re-snapshot)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
    add_spark_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.spark_table is not None:
        return run_spark(args)
    given = (("--consumer", args.consumer), ("--no-consumers", args.no_consumers))
    spark_only = [flag for flag, value in given if value]
    if spark_only:
        raise CliError(
            f"{' and '.join(spark_only)} name the consumers of a Spark feed table and need "
            "--spark-table; a database feed's consumers register their cursors themselves "
            "(docs/operations.md, Retention), so leave them out"
        )
    if args.feed is None:
        raise CliError(
            "retention needs the feed: --feed schema.table with --connection (PostgreSQL, "
            "SQL Server), or --spark-table schema.table for a Spark feed table"
        )
    max_age = check_policy(args)
    with connect(args) as db:
        client = db.feed_client(args.feed)
        try:
            done = client.retain(
                db.conn,
                max_age=max_age,
                keep_last=args.keep_last,
                override_consumers=args.override_consumers,
                shard=args.shard,
            )
        except ChangefeedError as exc:
            raise CliError(str(exc)) from None
        except Exception as exc:
            if db.dialect.permission_denied(exc):
                raise CliError(
                    f"this user may not remove events of {args.feed}: retention runs as the "
                    "feed's owner (the role that ran setup_feed), not as its reader or writer "
                    "role; connect as the owner"
                ) from None
            raise
    if args.json:
        print(json.dumps([_as_json(args.feed, r) for r in done], indent=2))
    else:
        for r in done:
            print(_line(args.feed, r))
        if not done:
            print(f"{args.feed}: no shard{'' if args.shard is None else f' {args.shard}'} yet")
    return 0


def _as_json(feed: str, r: Any) -> dict[str, Any]:
    return {
        "feed": feed,
        "shard": r.shard_id,
        "removed": r.removed,
        "horizon": None if r.horizon is None else encode_one(r.horizon),
        "held_for_consumers": r.held_for_consumers,
        "slowest_consumer": r.slowest_consumer,
    }


def _line(feed: str, r: Any) -> str:
    text = f"{feed} shard {r.shard_id}: removed {r.removed:,} event(s)"
    if r.horizon is not None:
        moment = timestamp_one(r.horizon).strftime("%Y-%m-%d %H:%M:%S")
        text += f"; horizon {encode_one(r.horizon)} ({moment} UTC)"
    if r.held_for_consumers:
        text += (
            f"; kept {r.held_for_consumers:,} more for consumer {r.slowest_consumer!r}, "
            "which has not read them (--override-consumers removes them)"
        )
    return text
