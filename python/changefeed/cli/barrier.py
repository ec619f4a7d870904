"""``changefeed barrier``: wait until a read includes everything committed so far.

    changefeed barrier --connection 'postgresql://app@db/shop' --feed shop.orders
    changefeed barrier --connection 'mssql://app@sql:1433/shop' --feed shop.payments --shard 0
    changefeed barrier --connection ... --feed shop.orders --shard 3 \\
        --position 01JD9M3V8Y7Q2W4E6R8T0Y2U4I     # wait for a known ULID instead

For each shard (default: every shard of the feed) it acquires a read barrier (protocol
section 7) and waits until the barrier is released: from then on a read up to the safe
point returns every event of every transaction that committed before the barrier was
acquired. In outbox mode it moves the outbox while waiting. Prints one line per shard.

Exit code 0 when every barrier was released, 3 on ``--timeout``, 1 on an error (the
message names the cause and the fix).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from changefeed.cli import EXIT_TIMEOUT, CliError
from changefeed.cli.feeds import (
    add_connection_arguments,
    connect,
    parse_ulid_arg,
)
from changefeed.ulid import encode_one


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "barrier",
        help="acquire a read barrier and wait until it is released",
        description="Acquire a read barrier on a feed's shards and wait until a read up to "
        "the safe point includes every transaction committed before it.",
    )
    add_connection_arguments(parser)
    parser.add_argument("--feed", required=True, help="the feed: schema.table of the source")
    parser.add_argument(
        "--shard",
        type=int,
        action="append",
        default=[],
        help="a shard (repeatable; default: every shard of the feed)",
    )
    parser.add_argument(
        "--position",
        metavar="ULID",
        help="wait until the safe point reaches this ULID instead of "
        "acquiring a barrier (26 base32 characters or 32 hex digits)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for all shards together (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    from changefeed.client import Barrier, BarrierTimeout

    if args.timeout <= 0:
        raise CliError(f"--timeout must be positive, got {args.timeout:g}")
    position = parse_ulid_arg(args.position, "--position") if args.position else None
    started = time.monotonic()
    deadline = started + args.timeout
    with connect(args) as db:
        conn = db.conn
        client = db.feed_client(args.feed)
        shards = sorted(set(args.shard)) or client.shards(db.conn)
        if not shards:
            print(f"{args.feed}: no shards yet (nothing written); nothing to wait for")
            return 0
        barriers = {
            shard: Barrier(shard, position, None)
            if position is not None
            else client.barrier_acquire(conn, shard)
            for shard in shards
        }
        for shard, barrier in barriers.items():
            shard_started = time.monotonic()
            try:
                client.barrier_wait(
                    conn, shard, timeout_s=max(0.0, deadline - time.monotonic()), barrier=barrier
                )
            except BarrierTimeout:
                point = client.safe_point(conn, shard)
                raise CliError(
                    f"{args.feed} shard {shard}: not released within "
                    f"{args.timeout:g} s (position {encode_one(barrier.position)}, safe point "
                    f"{encode_one(point.safe_point)}, {point.pending} pending write(s)). A pending "
                    "write is a transaction between its lock call and its commit; a stuck one "
                    "is burned after the feed's stall_timeout_ms. Wait longer (--timeout) or "
                    "find the writer (changefeed status shows PENDING)",
                    code=EXIT_TIMEOUT,
                ) from None
            print(
                f"{args.feed} shard {shard}: released in "
                f"{time.monotonic() - shard_started:.3f} s "
                f"(position {encode_one(barrier.position)})",
                flush=True,
            )
    return 0
