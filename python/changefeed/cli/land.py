"""``changefeed land``: land a feed into a Spark table, once or continuously.

    changefeed land --connection 'postgresql://app@/shop?host=/var/run/postgresql' \\
        --feed shop.orders --table landing.orders_feed --payload
    changefeed land ... --continuous --interval 60       # one batch per minute until stopped
    changefeed land ... --continuous --interval 1 --poll 0.1   # low latency: within seconds
    changefeed land --feed 'shop.*' --table 'landing.{schema}_{table}' --payload  # many feeds

Several feeds (a list, patterns, or ``--feeds-file``) land from one service:
:mod:`changefeed.cli.land_service`.

A continuous landing prints one line per landed batch, and a run that found nothing new
at most once a minute (``--verbose``: every run; ``--quiet``: no per-run line, errors and
the final ``stopped`` only).

By default the command starts an embedded local Spark (``local[2]``). With
``SPARK_CONF_DIR`` naming a shared catalog (``changefeed catalog init``) it uses that
catalog, which ``dbt run`` and other Spark processes use at the same time; otherwise its
catalog is a Derby metastore (one process at a time) and its tables live under
``--warehouse`` (default ``./spark-warehouse``), so successive runs find the table again.
With ``--spark existing`` it uses ``SparkSession.builder.getOrCreate()`` instead (under
spark-submit, or with the cluster's own configuration). Exit code 0 after a successful run (or a
stopped continuous run), 1 on an error, which is printed without a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from changefeed.cli import CliError, first_line, spark_missing
from changefeed.cli.catalog import shared_catalog
from changefeed.cli.land_service import is_service, split_feeds
from changefeed.cli.local_spark import add_spark_arguments, set_runtime_conf, spark_conf
from changefeed.client import redact
from changefeed.local.catalog import ANNOUNCED


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "land",
        help="land a feed into a Spark table (one batch per run)",
        description="Land a feed into a Spark table: one appended batch per run.",
    )
    add_source_arguments(parser, many=True)
    parser.add_argument("--feeds-file", metavar="FILE",
                        help="a YAML file of feeds, tables and per-feed options, landed by "
                        "one service (docs/spark-source.md, \"Many feeds: one landing "
                        "service\")")  # fmt: skip
    parser.add_argument("--workers", type=int,
                        help="several feeds: how many land at the same moment (default "
                        "8)")  # fmt: skip
    parser.add_argument("--attempts", type=int,
                        help="several feeds, one-shot: runs of a failing feed before it is "
                        "reported failed (default 3)")  # fmt: skip
    parser.add_argument("--status-file", metavar="FILE",
                        help="several feeds: keep each feed's state in this JSON file "
                        "(read by `changefeed status --service FILE`)")  # fmt: skip
    parser.add_argument("--continuous", action="store_true",
                        help="run every --poll seconds until SIGINT/SIGTERM, landing at most "
                        "one batch per --interval")  # fmt: skip
    parser.add_argument("--interval", type=float, default=60.0,
                        help="--continuous: least seconds between the starts of two landed "
                        "batches, 0.5 to 86400 (default 60)")  # fmt: skip
    parser.add_argument("--poll", type=float,
                        help="--continuous: seconds between two looks for new events, 0.05 "
                        "to --interval (default: --interval); e.g. --interval 1 --poll 0.1 "
                        "lands events within seconds")  # fmt: skip
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--verbose", action="store_true",
                       help="--continuous: a line for every run, also those that found "
                       "nothing new")  # fmt: skip
    shown.add_argument("--quiet", action="store_true",
                       help="--continuous: no line per run (errors still go to stderr)")
    add_spark_arguments(parser)


def add_source_arguments(
    parser: argparse.ArgumentParser,
    payload: bool = True,
    table_required: bool = True,
    many: bool = False,
) -> None:
    """The landing's arguments (connection, feed, table and the source options), shared
    by ``land`` and ``snapshot``; ``payload``: offer ``--payload`` (a snapshot always
    lands payloads); ``table_required``: false where the command checks it (``snapshot
    --cancel`` lands nothing); ``many``: ``--feed`` may name several feeds and patterns,
    and ``--table`` be a template (``land``, which checks what is required)."""
    add_feed_arguments(parser, many=many)
    table_help = ("the Spark table: database.table, or catalog.database.table in an Iceberg "
                  "catalog (e.g. iceberg.landing.orders)")  # fmt: skip
    if many:
        table_help += ("; with several feeds a template in which {schema} and {table} are "
                       "the parts of each feed's id (e.g. 'landing.{schema}_{table}')")  # fmt: skip
    parser.add_argument("--table", required=table_required and not many, help=table_help)
    parser.add_argument("--table-format", choices=["parquet", "delta", "iceberg"],
                        help="the format of a table the landing creates (default: parquet; "
                        "iceberg in an Iceberg catalog); an existing table keeps its "
                        "own")  # fmt: skip
    parser.add_argument("--shards", help="comma-separated shard ids (default: every shard)")
    parser.add_argument("--page-size", type=int, help="events per read_feed page (10000)")
    if payload:
        parser.add_argument(
            "--payload", action="store_true",
            help="also land the source row (a struct column 'payload')",
        )  # fmt: skip
    parser.add_argument("--starting-position",
                        help="for shards not landed yet: beginning (default), a ULID or an "
                        "ISO-8601 timestamp")  # fmt: skip
    parser.add_argument("--no-move-outbox", action="store_true",
                        help="outbox feeds: do not publish the outbox before reading")  # fmt: skip
    parser.add_argument("--consumer",
                        help="PostgreSQL: the name the landing registers its position "
                        "under, for retention and status (default: the table's name)")  # fmt: skip


def add_feed_arguments(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """The arguments that name the feed and its database (what :func:`feed_options`
    reads), shared by ``land``, ``snapshot`` and ``verify``; ``many``: see
    :func:`add_source_arguments` (a feeds file may name the connection)."""
    needed = not many and not os.environ.get("CHANGEFEED_CONNECTION")
    parser.add_argument("--connection", required=needed,
                        help="postgresql://... or mssql://user:password@host:port/database; "
                        "default from CHANGEFEED_CONNECTION", default=os.environ.get(
                            "CHANGEFEED_CONNECTION"))  # fmt: skip
    parser.add_argument("--password", default=os.environ.get("CHANGEFEED_PASSWORD"),
                        help="database password (default: CHANGEFEED_PASSWORD; keeps it out "
                        "of the URI and the process list)")  # fmt: skip
    if many:
        parser.add_argument("--feed", action=_Feeds,
                            help="the feed: schema.table of the source; repeatable or comma-"
                            "separated, and a pattern such as 'shop.*' names every registered "
                            "feed it matches (several feeds land from one service)")  # fmt: skip
    else:
        parser.add_argument("--feed", required=True, help="the feed: schema.table of the source")
    parser.add_argument("--changefeed-schema", help="the feeds' schema (default changefeed)")


class _Feeds(argparse.Action):
    """A repeated ``--feed`` joins its values with commas: ``args.feed`` stays one string
    (one feed's id when one is given, as for ``snapshot`` and ``verify``)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before},{values}" if before else values)


def feed_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``format("changefeed")`` options that name the feed and its database."""
    options = {"connection": args.connection, "feed": args.feed}
    if args.password:
        options["password"] = args.password
    if args.changefeed_schema:
        options["changefeedSchema"] = args.changefeed_schema
    return options


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``format("changefeed")`` options of the command line."""
    options = feed_options(args)
    if args.shards:
        options["shards"] = args.shards
    if args.page_size:
        options["pageSize"] = str(args.page_size)
    if getattr(args, "payload", True):
        options["payload"] = "true"
    if args.starting_position:
        options["startingPosition"] = args.starting_position
    if args.no_move_outbox:
        options["moveOutbox"] = "false"
    if args.consumer:
        options["consumer"] = args.consumer
    return options


def spark_session(args: argparse.Namespace) -> Any:
    conf = spark_conf(args)
    if args.spark == "existing":
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(_app_name(args))
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    from changefeed.local.spark import local_spark_session

    shared = shared_catalog(args.warehouse)
    session = local_spark_session(
        app_name=_app_name(args),
        warehouse_dir=os.path.abspath(args.warehouse or "spark-warehouse"),
        hive=True,
        catalog=shared,
    )
    set_runtime_conf(session, conf)
    return session


def _app_name(args: argparse.Namespace) -> str:
    return f"changefeed-{getattr(args, 'command', None) or 'land'}"


def start_spark(args: argparse.Namespace) -> Any:
    """:func:`spark_session`, its failures as :class:`CliError` naming the fix."""
    from changefeed.local.spark import JavaNotFound, require_java

    spark_conf(args)  # a refused --conf fails before Spark starts
    try:
        if args.spark == "local":
            require_java()
            # The start takes 20-40 s with nothing to show: say why the command is silent
            # (once: the catalog's spark-env.sh then says nothing).
            command = getattr(args, "command", None) or "land"
            print(f"changefeed {command}: starting a local Spark (20-40 s)", file=sys.stderr,
                  flush=True)  # fmt: skip
            os.environ[ANNOUNCED] = "1"
        return spark_session(args)
    except JavaNotFound as exc:
        raise CliError(str(exc)) from None
    except RuntimeError as exc:
        # PySpark's own start-up failure: the cause, not a traceback.
        raise CliError(f"Spark did not start: {first_line(exc)}") from None


def run(args: argparse.Namespace) -> int:
    # Spark is imported here, not at the top: `changefeed --help` must not need it.
    try:
        from changefeed.spark.landing import check_source, check_timing, land, land_continuously
        from changefeed.spark.source import ChangefeedSourceError
    except ImportError as exc:
        raise spark_missing("landing", exc) from None

    if args.continuous:
        try:
            check_timing(args.interval, args.poll)
        except ChangefeedSourceError as exc:
            raise CliError(f"--{exc}") from None
    elif args.poll is not None:
        raise CliError("--poll needs --continuous")
    if (args.verbose or args.quiet) and not args.continuous:
        raise CliError(f"--{'verbose' if args.verbose else 'quiet'} needs --continuous")
    if not args.feed and not args.feeds_file:
        raise CliError("name the feed: --feed schema.table (repeatable, or a pattern such as "
                       "'shop.*'), or --feeds-file FILE")  # fmt: skip
    if is_service(args):
        return _run_service(args)
    args.feed = split_feeds([args.feed])[0]
    if not args.connection:
        raise CliError("--connection is required (or set CHANGEFEED_CONNECTION)")
    if not args.table:
        raise CliError("--table is required: the Spark table to land into")
    options = source_options(args)
    try:
        # Seconds, where a Spark start takes half a minute: a wrong connection, driver
        # or feed name, or a landing of the table already running, is reported before
        # any Spark starts.
        check_source(options, args.table)
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None
    spark = start_spark(args)
    try:
        if not args.continuous:
            print(land(spark, options, args.table, table_format=args.table_format).summary(),
                  flush=True)
            return 0
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        printer = Printer(args.interval, verbose=args.verbose, quiet=args.quiet)
        land_continuously(spark, options, args.table, interval=args.interval, poll=args.poll,
                          stop=stop, on_result=printer, table_format=args.table_format)  # fmt: skip
        print("changefeed land: stopped", flush=True)
        return 0
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:
        # A Spark or database failure: its first line (Spark's go on for pages), redacted.
        raise CliError(f"{type(exc).__name__}: {redact(first_line(exc))}") from None


def _run_service(args: argparse.Namespace) -> int:
    """Several feeds: resolved (patterns against the database) before Spark starts."""
    from changefeed.cli.land_service import run_service, service_targets
    from changefeed.spark.source import ChangefeedSourceError

    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be at least 1, got {args.workers}")
    if args.attempts is not None and args.continuous:
        raise CliError("--attempts is for a one-shot run: a continuous service retries a "
                       "failing feed for as long as it runs")  # fmt: skip
    if args.attempts is not None and args.attempts < 1:
        raise CliError(f"--attempts must be at least 1, got {args.attempts}")
    args.attempts = args.attempts or 3
    shared = source_options(argparse.Namespace(**{**vars(args), "feed": ""}))
    del shared["feed"]
    if not shared.get("connection"):
        shared.pop("connection", None)
        if not args.feeds_file:
            raise CliError("--connection is required (or set CHANGEFEED_CONNECTION)")
    targets = service_targets(args, shared)
    spark = start_spark(args)
    try:
        return run_service(args, spark, targets)
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None


#: The most often a continuous landing says that it found nothing new, by default.
IDLE_LINE_SECONDS = 60.0


class Printer:
    """The continuous landing's output: every landed batch, and a run that found nothing
    new at most once per ``max(interval, IDLE_LINE_SECONDS)`` (with a short --poll, most
    runs find nothing new). ``verbose``: every run; ``quiet``: nothing."""

    def __init__(
        self,
        interval: float,
        *,
        verbose: bool = False,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_every = 0.0 if verbose else max(interval, IDLE_LINE_SECONDS)
        self.quiet = quiet
        self.clock = clock
        self.last_idle = -float("inf")

    def __call__(self, result: Any) -> None:
        if self.quiet:
            return
        if not result.idle:
            print(result.summary(), flush=True)
            return
        started = self.clock() - result.seconds
        # 1% slack: with --poll = --interval, runs start one interval apart, give or take
        # the timer's resolution, and each prints.
        if started - self.last_idle >= 0.99 * self.idle_every:
            self.last_idle = started
            print(result.summary(), flush=True)
