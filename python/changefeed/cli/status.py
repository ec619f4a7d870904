"""``changefeed status``: per feed and shard, the head, the safe point and consumers' lag.

    changefeed status --connection 'postgresql://app@db/shop'
    changefeed status --connection ... --feed shop.orders \\
        --consumer shop.orders=shop_landing.orders_feed      # a Spark table's cursors
    changefeed status --connection ... --cursor shop.orders:0=01JD9M3V8Y0000000000000000

A consumer is anything with a cursor per shard: a Spark table in the feed format (a
landed feed or a dbt consumer's output; its cursor is ``max(ulid)`` per shard, protocol
11.6), named with ``--consumer FEED=TABLE`` (on the shared catalog of ``SPARK_CONF_DIR``
read from its metastore and the table's files without a JVM, in about a second; else, and
for an Iceberg table, with a local Spark, ~20 s), or a
cursor you keep yourself, given with ``--cursor FEED:SHARD=ULID``. Lag is the number of
events after the cursor up to the safe point, and the age of the oldest of them.

Exit code 0, or 1 with one line naming the cause and the fix (unreachable database,
unknown feed, bad ULID, missing Java, ...). PostgreSQL (``postgresql://``) or SQL Server
(``mssql://``, ``sqlserver://``). PySpark is imported only for ``--consumer``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from changefeed.cli import CliError
from changefeed.cli.catalog import shared_catalog
from changefeed.cli.feeds import (
    Database,
    add_connection_arguments,
    connect,
    parse_ulid_arg,
)
from changefeed.cli.local_spark import start_local_spark
from changefeed.cli.metrics import exposition
from changefeed.cli.service_status import read_service, render_service
from changefeed.cli.status_types import ConsumerLag, FeedStatus, ShardStatus
from changefeed.client import ZERO_ULID
from changefeed.ulid import encode_one, timestamp_ms_one, timestamp_one

# -- status --------------------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="per feed and shard: head, safe point and consumers' lag",
        description="Per feed and shard: the head, the safe point, pending writes, the "
        "outbox backlog, and the lag of consumers (Spark tables or given cursors).",
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--feed",
        action="append",
        default=[],
        help="only this feed (schema.table; repeatable; default: every registered feed)",
    )
    parser.add_argument(
        "--consumer",
        action="append",
        default=[],
        metavar="FEED=TABLE",
        help="a Spark table with shard_id and ulid columns that consumes FEED "
        "(a landed feed or a dbt consumer's output; repeatable). On the shared catalog "
        "of SPARK_CONF_DIR read without Spark (parquet, Delta); else, and for Iceberg, "
        "with a local Spark (on --warehouse without a shared catalog)",
    )
    parser.add_argument(
        "--cursor",
        action="append",
        default=[],
        metavar="FEED:SHARD=ULID",
        help="a consumer cursor you keep yourself (repeatable)",
    )
    parser.add_argument(
        "--warehouse",
        help="--consumer without a shared catalog (SPARK_CONF_DIR): the Spark warehouse "
        "and Derby metastore directory (default: spark-warehouse)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (tables, the default), json, or prometheus (text exposition for "
        "monitoring; metric names in docs/operations.md)",
    )
    parser.add_argument("--json", action="store_true", help="the same as --format json")
    parser.add_argument(
        "--service",
        metavar="FILE",
        help="a landing service's status file (`changefeed land --status-file FILE`): "
        "each feed's state, failures in a row and last error; read without Spark, and "
        "without a database unless --connection is given too",
    )


FORMATS = ("text", "json", "prometheus")


def run(args: argparse.Namespace) -> int:
    fmt = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        raise CliError(f"--json and --format {fmt} contradict each other: give one of them")
    service = read_service(Path(args.service)) if args.service else None
    if service is not None and not args.connection:
        if args.feed or args.consumer or args.cursor:
            raise CliError("--feed, --consumer and --cursor read the database: give "
                           "--connection (or set CHANGEFEED_CONNECTION) too")  # fmt: skip
        feeds: list[FeedStatus] = []
        shards: list[ShardStatus] = []
        lags: list[ConsumerLag] = []
    else:
        feeds, shards, lags = collect(args)
    if fmt == "json":
        document: dict[str, Any] = {
            "feeds": [asdict(f) for f in feeds],
            "shards": [asdict(s) for s in shards],
            "consumers": [asdict(c) for c in lags],
        }
        if service is not None:
            document["service"] = {**service[0], "feeds": [asdict(f) for f in service[1]]}
        print(json.dumps(document, indent=2))
    elif fmt == "prometheus":
        print(exposition(feeds, shards, lags, service[1] if service else ()), end="")
    else:
        parts = [] if service is not None and not args.connection else [render(shards, lags, feeds)]
        if service is not None:
            parts.append(render_service(*service))
        print("\n\n".join(parts))
    return 0


def collect(
    args: argparse.Namespace,
) -> tuple[list[FeedStatus], list[ShardStatus], list[ConsumerLag]]:
    cursor_args = [_parse_cursor(text) for text in args.cursor]
    consumer_args = [_parse_consumer(text) for text in args.consumer]
    with connect(args) as db:
        conn = db.conn
        known = db.registered_feeds()
        feeds = list(args.feed) or list(known)
        for feed in [*feeds, *(c[0] for c in cursor_args), *(c[0] for c in consumer_args)]:
            if feed not in known:
                raise CliError(
                    f"unknown feed {feed!r}: registered feeds are {', '.join(known) or 'none'}. "
                    "Check the name (schema.table of the source table), or set the feed up "
                    "with `dbt run-operation changefeed.setup_feed`"
                )
        clients = {feed: db.feed_client(feed) for feed in known}
        statuses: list[FeedStatus] = []
        shards: list[ShardStatus] = []
        safe_points: dict[tuple[str, int], bytes] = {}
        horizons: dict[tuple[str, int], bytes] = {}
        for feed in feeds:
            client = clients[feed]
            info = client.info(conn)
            capture, lost = client.capture_state(db.conn)
            statuses.append(FeedStatus(feed, info.mode, capture, lost))
            for shard in client.shards(db.conn):
                point = client.safe_point(conn, shard)
                safe_points[(feed, shard)] = point.safe_point
                outbox = client.outbox_rows(db.conn, shard) if info.mode == "outbox" else None
                horizon = client.retention_horizon(db.conn, shard)
                if horizon is not None:
                    horizons[(feed, shard)] = horizon
                shards.append(
                    ShardStatus(
                        feed=feed,
                        mode=info.mode,
                        shard=shard,
                        head=_text(point.head),
                        head_time=_time(point.head),
                        safe_point=_text(point.safe_point),
                        pending=point.pending,
                        outbox=outbox,
                        oldest_pending_age_s=client.oldest_pending_age(db.conn, shard),
                        retention_horizon=_text(horizon),
                        head_unix=_unix(point.head),
                        safe_point_unix=_unix(point.safe_point),
                        retention_horizon_unix=_unix(horizon),
                    )
                )
        cursors: list[tuple[str, str, int, bytes]] = [
            (name, feed, shard, value)
            for feed in feeds
            for name, shard, value in clients[feed].consumers(db.conn)
        ]
        cursors += [
            (f"--cursor {feed}:{shard}", feed, shard, value) for feed, shard, value in cursor_args
        ]
        if consumer_args:
            # A landing registers its cursor under its table's name; the table named with
            # --consumer is measured instead, so each consumer shard is one row.
            measured = _spark_cursors(args.warehouse, consumer_args, db, clients)
            named = {(name, feed, shard) for name, feed, shard, _ in measured}
            cursors = [c for c in cursors if (c[0], c[1], c[2]) not in named] + measured
        lags = [
            _lag(db, clients[feed], name, feed, shard, cursor, safe_points, horizons)
            for name, feed, shard, cursor in cursors
        ]
    return statuses, shards, lags


def _text(value: bytes | None) -> str | None:
    """A ULID as text; None for no ULID or 16 zero bytes (an empty shard)."""
    return None if value is None or value == ZERO_ULID else encode_one(value)


def _time(value: bytes | None) -> str | None:
    """A ULID's time as ISO text to the millisecond; None for no ULID or 16 zero bytes."""
    return None if value is None or value == ZERO_ULID else _iso(timestamp_one(value))


def _unix(value: bytes | None) -> float | None:
    """A ULID's time in Unix seconds; None for no ULID or 16 zero bytes."""
    if value is None or value == ZERO_ULID:
        return None
    return timestamp_ms_one(value) / 1000


def _spark_cursors(
    warehouse: str | None,
    consumers: Sequence[tuple[str, str]],
    db: Database,
    clients: dict[str, Any],
) -> list[tuple[str, str, int, bytes]]:
    """Each consumer table's cursor per shard of its feed: on the shared catalog read
    from its metastore and files, with no JVM (:mod:`changefeed.local.catalog_tables`), else
    (another catalog, or a table that needs Spark, which is then said) with a local
    Spark."""
    shared = shared_catalog(warehouse)
    shards = {feed: clients[feed].shards(db.conn) for feed, _ in consumers}
    heads: dict[str, dict[int, bytes]] = {}
    with_spark = list(consumers)
    if shared is not None:
        with_spark = []
        for feed, table in consumers:
            found = _catalog_heads(shared, table, shards[feed])
            if isinstance(found, str):
                print(f"changefeed status: {found}: reading it with Spark (20-40 s)",
                      file=sys.stderr, flush=True)  # fmt: skip
                with_spark.append((feed, table))
            else:
                heads[table] = found
    if with_spark:
        heads.update(_heads_with_spark(warehouse, shared, with_spark))
    return [
        (table, feed, shard, heads[table].get(shard, ZERO_ULID))
        for feed, table in consumers
        for shard in shards[feed]
    ]


def _catalog_heads(shared: Any, table: str, shards: Sequence[int]) -> dict[int, bytes] | str:
    """``table``'s heads read without Spark, or why Spark must read them."""
    from changefeed.local.catalog_tables import NeedsSpark, TableNotInCatalog, feed_heads

    try:
        return feed_heads(shared, table, shards)
    except TableNotInCatalog:
        raise _missing(table, shared, None) from None
    except NeedsSpark as exc:
        return str(exc)
    except ImportError as exc:
        return f"{exc.name or 'pyarrow'} is not installed"


def _missing(table: str, shared: Any, warehouse: str | None) -> CliError:
    hint = (
        f"the shared catalog of SPARK_CONF_DIR ({shared.directory}): check --consumer"
        if shared is not None
        else f"{Path(warehouse or 'spark-warehouse').resolve()}: check --consumer and "
        "--warehouse (the directory that holds metastore_db)"
    )
    return CliError(f"consumer table {table} does not exist in the Spark catalog of {hint}")


def _heads_with_spark(
    warehouse: str | None, shared: Any, consumers: Sequence[tuple[str, str]]
) -> dict[str, dict[int, bytes]]:
    from changefeed.spark.feedtable import CatalogUnavailable, FeedTable

    spark = start_local_spark(warehouse, "status", "--consumer")
    heads: dict[str, dict[int, bytes]] = {}
    for _, table in consumers:
        try:
            feed_table = FeedTable.for_name(spark, table)
            exists = feed_table.exists()
        except (CatalogUnavailable, ValueError) as exc:  # ValueError: a malformed name
            raise CliError(str(exc)) from None
        if not exists:
            raise _missing(table, shared, warehouse)
        heads[table] = feed_table.heads()
    return heads


def _lag(
    db: Database,
    client: Any,
    name: str,
    feed: str,
    shard: int,
    cursor: bytes,
    safe_points: dict[tuple[str, int], bytes],
    horizons: dict[tuple[str, int], bytes],
) -> ConsumerLag:
    horizon = horizons.get((feed, shard))
    if horizon is None and (feed, shard) not in safe_points:
        horizon = client.retention_horizon(db.conn, shard)
    safe = safe_points.get((feed, shard))
    if safe is None:
        safe = client.safe_point(db.conn, shard).safe_point
    count, oldest = client.unread(db.conn, shard, cursor, safe)
    age = None if oldest is None else max(0.0, time.time() - timestamp_one(oldest).timestamp())
    return ConsumerLag(
        consumer=name,
        feed=feed,
        shard=shard,
        cursor=None if cursor == ZERO_ULID else encode_one(cursor),
        lag_events=count,
        oldest_unread_age_s=None if age is None else round(age, 1),
        behind_retention=horizon is not None and cursor < horizon,
    )


def _parse_cursor(text: str) -> tuple[str, int, bytes]:
    target, sep, value = text.partition("=")
    feed, sep2, shard = target.rpartition(":")
    if not sep or not sep2 or not feed:
        raise CliError(
            f"--cursor {text!r} must be written FEED:SHARD=ULID, e.g. "
            "shop.orders:0=01ARZ3NDEKTSV4RRFFQ69G5FAV"
        )
    try:
        shard_id = int(shard)
    except ValueError:
        raise CliError(f"--cursor {text!r}: the shard {shard!r} is not an integer") from None
    return feed, shard_id, parse_ulid_arg(value, f"--cursor {feed}:{shard}")


def _parse_consumer(text: str) -> tuple[str, str]:
    feed, sep, table = text.partition("=")
    if not sep or not feed.strip() or "." not in table:
        raise CliError(
            f"--consumer {text!r} must be written FEED=DATABASE.TABLE, e.g. "
            "shop.orders=shop_landing.orders_feed"
        )
    return feed.strip(), table.strip()


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def render(
    shards: Sequence[ShardStatus],
    lags: Sequence[ConsumerLag],
    feeds: Sequence[FeedStatus] = (),
) -> str:
    """The two tables ``changefeed status`` prints, and a warning per feed whose capture
    is lost and per consumer behind retention."""
    rows = [["FEED", "MODE", "SHARD", "HEAD", "HEAD TIME (UTC)", "SAFE POINT", "PENDING", "OUTBOX"]]
    for s in shards:
        safe = (
            "-" if s.safe_point is None else ("= head" if s.safe_point == s.head else s.safe_point)
        )
        rows.append(
            [
                s.feed,
                s.mode,
                str(s.shard),
                s.head or "(empty)",
                s.head_time or "-",
                safe,
                _pending(s),
                "-" if s.outbox is None else str(s.outbox),
            ]
        )
    out = [_table(rows, right={2, 6, 7})]
    if not shards:
        out.append("(no shards yet: nothing has been written to these feeds)")
    if lags:
        rows = [["CONSUMER", "FEED", "SHARD", "CURSOR", "LAG (EVENTS)", "OLDEST UNREAD"]]
        for c in lags:
            age = "-" if c.oldest_unread_age_s is None else f"{c.oldest_unread_age_s:.1f} s ago"
            rows.append(
                [c.consumer, c.feed, str(c.shard), c.cursor or "(start)", f"{c.lag_events:,}", age]
            )
        out.append("")
        out.append(_table(rows, right={2, 4}))
    warnings = [capture_lost_warning(f) for f in feeds if f.capture_lost]
    warnings += [behind_retention_warning(c) for c in lags if c.behind_retention]
    if warnings:
        out.append("")
        out.extend(warnings)
    return "\n".join(out)


def _pending(shard: ShardStatus) -> str:
    """Pending writes, with the oldest one's age when there are some and it is known."""
    if not shard.pending or shard.oldest_pending_age_s is None:
        return str(shard.pending)
    return f"{shard.pending} (oldest {shard.oldest_pending_age_s:.1f} s)"


def capture_lost_warning(feed: FeedStatus) -> str:
    return (
        f"CAPTURE LOST: {feed.feed} (capture: trigger): its source table has lost its capture "
        "triggers or has them disabled (CF011), so its writes since then are not in the feed, "
        "and readers at the head fail with CaptureLost. Run `dbt run-operation "
        "changefeed.setup_feed` with the feed's config to re-create them, then re-emit the "
        "changes made meanwhile"
    )


def behind_retention_warning(lag: ConsumerLag) -> str:
    return (
        f"BEHIND RETENTION: {lag.consumer} on {lag.feed} shard {lag.shard}: its cursor lies "
        "below events that retention removed, so it cannot continue (CF013, "
        "FellBehindRetention). Re-snapshot it: copy the source table and continue from the "
        "feed's current safe point (docs/operations.md#retention)"
    )


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
