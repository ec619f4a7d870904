"""``changefeed retention --spark-table``: retention of a Spark feed table (protocol 11.7),
by :func:`changefeed.spark.feedtable.retain`; see the ``retention`` module doc."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from changefeed.cli import CliError
from changefeed.cli.local_spark import set_runtime_conf, spark_conf, start_local_spark
from changefeed.cli.retention_policy import check_policy

#: What a Spark feed table holds besides its own columns (docs/protocol.md 11.1).
_FEED_COLUMNS = ("shard_id", "ulid", "changefeed_batch")


def run_spark(args: argparse.Namespace) -> int:
    _check_arguments(args)
    max_age = check_policy(args)
    try:
        from changefeed.spark.feedtable import retain
    except ImportError as exc:
        raise CliError(
            f"retention of a Spark feed table needs Spark, and {exc.name or 'pyspark'} is not "
            "installed: pip install 'changefeed[spark]'"
        ) from None
    spark = _spark(args)
    table = args.spark_table
    _check_feed_table(spark, table)
    try:
        done = retain(
            spark,
            table,
            consumers=args.consumer,
            max_age=max_age,
            keep_last=args.keep_last,
            override_consumers=args.override_consumers,
        )
    except ValueError as exc:
        # A consumer table that is not a consumer, or a table name retain cannot take.
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps([_as_json(done)], indent=2))
    else:
        print(_line(done))
    return 0


def _check_arguments(args: argparse.Namespace) -> None:
    explicit_connection = args.connection not in (None, os.environ.get("CHANGEFEED_CONNECTION"))
    given = (
        ("--connection", explicit_connection),
        ("--feed", args.feed is not None),
        ("--shard", args.shard is not None),
    )
    database_only = [flag for flag, value in given if value]
    if database_only:
        raise CliError(
            f"{' and '.join(database_only)} and --spark-table do not go together: "
            "--spark-table retains a Spark feed table (whole batches of every shard), "
            "--connection and --feed a database feed (--shard: one of its shards); give "
            "one of the two"
        )
    if args.no_consumers and args.consumer:
        raise CliError(
            "--no-consumers says the feed has no consumer, but --consumer names one: give "
            "either every consumer's output table with --consumer, or --no-consumers"
        )
    if not (args.consumer or args.no_consumers or args.override_consumers):
        raise CliError(
            f"which tables consume {args.spark_table}? A Spark feed's consumers keep their "
            "cursors in their own output tables, which retention cannot find: name every "
            "one with --consumer schema.table (repeatable), or say --no-consumers; "
            "--override-consumers removes regardless (dbt projects: dbt run-operation "
            "changefeed.apply_retention finds them in the project)"
        )


def _spark(args: argparse.Namespace) -> Any:
    if args.spark == "existing":
        from changefeed.cli.land import start_spark

        return start_spark(args)
    conf = spark_conf(args)  # a refused --conf fails before Spark starts
    spark = start_local_spark(args.warehouse, "retention", "--spark-table")
    set_runtime_conf(spark, conf)
    return spark


def _check_feed_table(spark: Any, table: str) -> None:
    from changefeed.spark.feedtable import CatalogUnavailable, FeedTable

    try:
        exists = FeedTable.for_name(spark, table).exists()
    except ValueError:  # a malformed name
        exists = False
    except CatalogUnavailable as exc:
        raise CliError(str(exc)) from None
    if not exists:
        raise CliError(
            f"there is no table {table!r} in this Spark catalog: check --spark-table "
            "(schema.table) and --warehouse (the directory the feed was written with), or "
            "--spark existing with the cluster's catalog"
        )
    columns = {c.lower() for c in spark.table(table).columns}
    missing = [c for c in _FEED_COLUMNS if c not in columns]
    if missing:
        raise CliError(
            f"{table} is not a Spark feed table: it has no column {', '.join(missing)} "
            "(a feed table has shard_id, ulid and is partitioned by changefeed_batch; "
            "docs/protocol.md 11.1); name the landed or published feed table"
        )


def _as_json(r: Any) -> dict[str, Any]:
    return {
        "table": r.table,
        "removed_batches": r.removed_batches,
        "horizon": r.horizon,
        "oldest_batch": r.oldest_batch,
        "newest_batch": r.newest_batch,
        "held_for_consumers": r.held_for_consumers,
        "slowest_consumer": r.slowest_consumer,
        "held_for_head": r.held_for_head,
        "head_shard": r.head_shard,
    }


def _line(r: Any) -> str:
    """The line of ``dbt run-operation changefeed.apply_retention`` on Spark."""
    if r.newest_batch is None:
        return f"{r.table}: no batches yet"
    text = (
        f"{r.table}: removed {r.removed_batches:,} batch(es); keeps batches {r.oldest_batch} "
        f"to {r.newest_batch} (horizon {r.horizon})"
    )
    if r.slowest_consumer is not None:
        text += (
            f"; kept {r.held_for_consumers:,} more for consumer {r.slowest_consumer}, which "
            "has not read them (--override-consumers removes them)"
        )
    if r.head_shard is not None:
        text += (
            f"; kept {r.held_for_head:,} more for the head of shard {r.head_shard}, which "
            "has not written since (its newest batch stays)"
        )
    return text
