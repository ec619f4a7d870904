"""``changefeed status``: per feed and shard, the head, the safe point and consumers' lag.

    changefeed status --connection 'postgresql://app@db/shop'
    changefeed status --connection ... --feed shop.orders \\
        --consumer shop.orders=shop_landing.orders_feed      # a Spark table's cursors
    changefeed status --connection ... --cursor shop.orders:0=01JD9M3V8Y0000000000000000

A consumer is anything with a cursor per shard: a Spark table in the feed format (a
landed feed or a dbt consumer's output; its cursor is ``max(ulid)`` per shard, protocol
11.6), named with ``--consumer FEED=TABLE`` (this starts a local Spark, ~20 s), or a
cursor you keep yourself, given with ``--cursor FEED:SHARD=ULID``. Lag is the number of
events after the cursor up to the safe point, and the age of the oldest of them.

Exit code 0, or 1 with one line naming the cause and the fix (unreachable database,
unknown feed, bad ULID, missing Java, ...). PostgreSQL only for now. PySpark is imported
only for ``--consumer``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from changefeed.cli import CliError
from changefeed.cli.feeds import (
    add_connection_arguments,
    connect,
    feed_client,
    feed_shards,
    parse_ulid_arg,
    ulid_text,
    ulid_time,
)
from changefeed.client import ZERO_ULID

# -- status --------------------------------------------------------------------------------


@dataclass
class ShardStatus:
    feed: str
    mode: str
    shard: int
    head: str | None
    head_time: str | None
    safe_point: str | None
    pending: int
    outbox: int | None


@dataclass
class ConsumerLag:
    consumer: str
    feed: str
    shard: int
    cursor: str | None
    lag_events: int
    oldest_unread_age_s: float | None


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
        "(a landed feed or a dbt consumer's output; repeatable). Starts a "
        "local Spark on --warehouse",
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
        default="spark-warehouse",
        help="the Spark warehouse and metastore directory for --consumer "
        "(default: spark-warehouse)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    shards, lags = collect(args)
    if args.json:
        print(
            json.dumps(
                {"shards": [asdict(s) for s in shards], "consumers": [asdict(c) for c in lags]},
                indent=2,
            )
        )
    else:
        print(render(shards, lags))
    return 0


def collect(args: argparse.Namespace) -> tuple[list[ShardStatus], list[ConsumerLag]]:
    from changefeed.client import ChangefeedError, registered_feeds

    cursor_args = [_parse_cursor(text) for text in args.cursor]
    consumer_args = [_parse_consumer(text) for text in args.consumer]
    with connect(args) as conn:
        try:
            known = registered_feeds(conn, args.changefeed_schema)
        except ChangefeedError as exc:
            raise CliError(f"{exc}") from None
        except Exception as exc:  # the registry table is missing
            if type(exc).__name__ != "UndefinedTable":
                raise
            raise CliError(
                f"no feed is set up in this database (there is no {args.changefeed_schema}.feeds "
                "registry): set one up with `dbt run-operation changefeed.setup_feed`, or check "
                "--changefeed-schema"
            ) from None
        feeds = list(args.feed) or list(known)
        for feed in [*feeds, *(c[0] for c in cursor_args), *(c[0] for c in consumer_args)]:
            if feed not in known:
                raise CliError(
                    f"unknown feed {feed!r}: registered feeds are {', '.join(known) or 'none'}. "
                    "Check the name (schema.table of the source table), or set the feed up "
                    "with `dbt run-operation changefeed.setup_feed`"
                )
        clients = {feed: feed_client(conn, feed, args.changefeed_schema) for feed in known}
        shards: list[ShardStatus] = []
        safe_points: dict[tuple[str, int], bytes] = {}
        for feed in feeds:
            client = clients[feed]
            info = client.info(conn)
            for shard in feed_shards(conn, client):
                point = client.safe_point(conn, shard)
                safe_points[(feed, shard)] = point.safe_point
                outbox = None
                if info.mode == "outbox":
                    outbox = int(
                        conn.execute(
                            f"select count(*) from {info.q('outbox')} where shard_id = %s", (shard,)
                        ).fetchone()[0]
                    )
                empty = point.head == ZERO_ULID
                shards.append(
                    ShardStatus(
                        feed=feed,
                        mode=info.mode,
                        shard=shard,
                        head=None if empty else ulid_text(point.head),
                        head_time=None if empty else _iso(ulid_time(point.head)),
                        safe_point=None
                        if point.safe_point == ZERO_ULID
                        else ulid_text(point.safe_point),
                        pending=point.pending,
                        outbox=outbox,
                    )
                )
        cursors: list[tuple[str, str, int, bytes]] = [
            (f"--cursor {feed}:{shard}", feed, shard, value) for feed, shard, value in cursor_args
        ]
        if consumer_args:
            cursors += _spark_cursors(Path(args.warehouse), consumer_args, conn, clients)
        lags = [
            _lag(conn, clients[feed], name, feed, shard, cursor, safe_points)
            for name, feed, shard, cursor in cursors
        ]
    return shards, lags


def _spark_cursors(
    warehouse: Path,
    consumers: Sequence[tuple[str, str]],
    conn: Any,
    clients: dict[str, Any],
) -> list[tuple[str, str, int, bytes]]:
    spark = start_local_spark(warehouse.resolve(), "changefeed-status")
    found: list[tuple[str, str, int, bytes]] = []
    for feed, table in consumers:
        if not spark.catalog.tableExists(table):
            raise CliError(
                f"consumer table {table} does not exist in the Spark catalog of "
                f"{warehouse.resolve()}: check --consumer and --warehouse (the directory "
                "that holds metastore_db)"
            )
        spark.sql(f"refresh table {table}")
        rows = spark.sql(f"select shard_id, max(ulid) from {table} group by shard_id").collect()
        heads = {int(r[0]): bytes(r[1]) for r in rows}
        for shard in feed_shards(conn, clients[feed]):
            found.append((table, feed, shard, heads.get(shard, ZERO_ULID)))
    return found


def start_local_spark(warehouse: Path, app_name: str) -> Any:
    """A local Spark on ``warehouse`` (Derby metastore); missing Java becomes a CliError."""
    import tempfile

    from changefeed.local_spark import (
        JavaNotFound,
        jvm_output_to,
        local_spark_session,
        require_java,
    )

    try:
        require_java()
    except JavaNotFound as exc:
        raise CliError(f"{exc}; or leave out --consumer") from None
    if not (warehouse / "metastore_db").exists():
        raise CliError(
            f"there is no Spark metastore in {warehouse} (no metastore_db): pass the "
            "warehouse directory the tables were written with (--warehouse)"
        )
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise CliError("pyspark is not installed: pip install 'changefeed[spark]'") from None
    # Spark's own log lines go to a file, not between the command's output.
    log = Path(tempfile.gettempdir()) / "changefeed-status-spark.log"
    try:
        with jvm_output_to(log):
            spark = local_spark_session(app_name=app_name, warehouse_dir=warehouse, hive=True)
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "XSDB6" in str(exc) or "another instance of Derby" in str(exc):
            text = (
                f"the metastore in {warehouse} is in use by another Spark process (a running "
                "demo or landing); run this again when it has finished"
            )
        raise CliError(f"Spark did not start: {text}") from None
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def _lag(
    conn: Any,
    client: Any,
    name: str,
    feed: str,
    shard: int,
    cursor: bytes,
    safe_points: dict[tuple[str, int], bytes],
) -> ConsumerLag:
    safe = safe_points.get((feed, shard))
    if safe is None:
        safe = client.safe_point(conn, shard).safe_point
    info = client.info(conn)
    window = "where shard_id = %s and ulid > %s and ulid <= %s"
    row = conn.execute(
        f"select (select count(*) from {info.q('feed')} {window}), "
        f"(select ulid from {info.q('feed')} {window} order by ulid limit 1)",
        (shard, cursor, safe, shard, cursor, safe),
    ).fetchone()
    count, oldest = int(row[0]), row[1]
    age = None if oldest is None else max(0.0, time.time() - ulid_time(bytes(oldest)).timestamp())
    return ConsumerLag(
        consumer=name,
        feed=feed,
        shard=shard,
        cursor=None if cursor == ZERO_ULID else ulid_text(cursor),
        lag_events=count,
        oldest_unread_age_s=None if age is None else round(age, 1),
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


def render(shards: Sequence[ShardStatus], lags: Sequence[ConsumerLag]) -> str:
    """The two tables ``changefeed status`` prints."""
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
                str(s.pending),
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
    return "\n".join(out)


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
