"""Land a PostgreSQL or SQL Server feed into a Spark table, incrementally.

>>> from changefeed.spark.landing import land                            # doctest: +SKIP
>>> result = land(spark, {"connection": "postgresql://app@db/shop",  # doctest: +SKIP
...                       "feed": "shop.orders", "payload": "true"},
...               "landing.orders_feed")
>>> result.batch, result.events                                    # doctest: +SKIP
(7, 1520)

Each run appends at most one batch, in the Spark feed format of docs/protocol.md
section 11, so dbt-spark consumers read a landed feed exactly like a published one:

1. the cursor of each shard is the table's committed ``max(ulid)`` for that shard (the
   table is the only record of progress), read from its newest batches backwards until
   every shard is found, and the batch number ``N`` is one more than the table's highest
   (its partition list);
2. the source's safe point of each shard is read once (outbox feeds: after moving the
   outbox), and ``format("changefeed")`` reads ``(cursor, safe point]``;
3. the rows are written as partition ``changefeed_batch=N`` with a dynamic
   ``insert overwrite``: the partition's registration is the commit. A run killed at any
   moment left nothing readers can see, and its re-run computes the same ``N`` and the
   same cursors, and replaces whatever the killed run left;
4. on PostgreSQL, the landed position of each shard is registered for retention
   (``save_cursor``, protocol 8.1) under the option ``consumer``, by default the table's
   name, so retention keeps every event the table does not hold yet and ``changefeed
   status`` shows the landing's lag. A shard whose cursor lies below what retention
   removed fails the run before anything is read ("fell behind retention").

Never run two landings of one table at the same time (protocol 11, F4).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from changefeed.client.core import ZERO_ULID
from changefeed.spark.landing import _format
from changefeed.spark.source import (
    LANDING_FIX,
    ChangefeedSourceError,
    FeedOptions,
    SourceFeed,
    check_not_behind,
    encode_offset,
    open_backend,
    parse_options,
    register,
)

__all__ = ["ChangefeedSourceError", "LandingResult", "check_source", "land"]

#: ``on_stage(stage, details)`` is called at "planned" (cursors, safe points and batch
#: fixed; nothing written yet) and "committed" (the batch is registered).
StageCallback = Callable[[str, Mapping[str, Any]], None]

_NOT_FOR_LANDING = ("startingoffsets", "endingoffsets")


@dataclass(frozen=True)
class LandingResult:
    """What one landing run did. ``batch`` is ``None`` when there was nothing new."""

    table: str
    batch: int | None
    events: int
    cursors: dict[int, bytes] = field(repr=False)
    safe_points: dict[int, bytes] = field(repr=False)
    seconds: float

    def summary(self) -> str:
        if self.batch is None:
            return (
                f"{self.table}: nothing new ({len(self.safe_points)} shards, {self.seconds:.1f} s)"
            )
        rate = self.events / self.seconds if self.seconds > 0 else float("inf")
        return (
            f"{self.table}: batch {self.batch}, {self.events} events from "
            f"{len(self.safe_points)} shards in {self.seconds:.1f} s ({rate:,.0f} events/s)"
        )


def land(
    spark: Any,
    source_options: Mapping[str, str],
    target_table: str,
    *,
    on_stage: StageCallback | None = None,
) -> LandingResult:
    """Land the feed's new events into ``target_table`` as one batch; see the module doc.

    ``source_options`` are the options of ``format("changefeed")`` (``connection``,
    ``feed`` and optionally ``shards``, ``pageSize``, ``payload``, ``startingPosition``,
    ``moveOutbox``, ``user``, ``password``, ``changefeedSchema``, ``consumer``).
    ``startingPosition`` applies to shards the table has no rows of yet; it must be
    ``beginning``, a ULID or a timestamp (not ``now``: a moving start cannot be re-derived
    from the table). The table is created on the first run; an existing table must have
    the feed's columns. ``consumer`` names the landing for retention (see the module doc).
    """
    started = time.monotonic()
    options = _landing_options(source_options)
    table = _format.parse_table(spark, target_table)
    _format.check_partition_management(spark)
    register(spark)

    with open_backend(options.connection, options.changefeed_schema) as backend:
        info = backend.describe(options.feed, options.payload)
        schema = _format.feed_table_schema(info.layout().spark_schema())
        listed = backend.shards(info) if options.shards is None else list(options.shards)
        if _format.table_exists(spark, table):
            _format.check_table(spark, table, schema)
            heads, last_batch = _format.committed_heads(spark, table, listed)
        else:
            _format.create_table(spark, table, schema)
            heads, last_batch = {}, 0
        shards = _shards(options, listed, heads)
        start = options.starting_position.fixed_cursor()
        cursors = {shard: max(heads.get(shard, ZERO_ULID), start) for shard in shards}
        # Before the probe below, which reads the feed table directly: past the horizon it
        # would find nothing and call the landing caught up, silently.
        check_not_behind(backend, info, cursors, f"landing {table.text}", LANDING_FIX)
        if options.move_outbox:
            backend.move_outbox(info, shards)
        safe_points = backend.safe_points(info, shards)
        ends = {shard: max(safe_points[shard], cursors[shard]) for shard in shards}
        # The cursor is the last landed event, the safe point the end of its block and
        # beyond: probe for one event first, so a run with nothing new starts no Spark job.
        pending = [
            shard
            for shard in shards
            if ends[shard] > cursors[shard]
            and backend.has_events(info, shard, cursors[shard], ends[shard])
        ]
    batch = last_batch + 1
    details = {"table": table.text, "batch": batch, "cursors": cursors, "safe_points": ends}
    if on_stage is not None:
        on_stage("planned", details)
    consumer = options.consumer or table.text
    if not pending:
        _register(options, info, consumer, ends)
        return LandingResult(table.text, None, 0, cursors, ends, time.monotonic() - started)

    starts = {shard: cursors[shard] for shard in pending}
    frame = _source_frame(spark, source_options, info, starts, {s: ends[s] for s in pending})
    _format.write_batch(frame, table, batch)
    events = _format.count_batch(spark, table, batch)
    _register(options, info, consumer, ends)
    if on_stage is not None:
        on_stage("committed", {**details, "events": events})
    return LandingResult(
        table.text, batch if events else None, events, cursors, ends, time.monotonic() - started
    )


def check_source(source_options: Mapping[str, str]) -> None:
    """Check the options, the connection (and its driver) and the feed, with no Spark:
    :func:`land` checks them too, but only after its caller started Spark, which takes
    half a minute, so ``changefeed land`` calls this first to report a typo at once.
    Raises :class:`ChangefeedSourceError` naming the cause."""
    options = _landing_options(source_options)
    with open_backend(options.connection, options.changefeed_schema) as backend:
        backend.describe(options.feed, options.payload)


def _register(
    options: FeedOptions, info: SourceFeed, consumer: str, ends: Mapping[int, bytes]
) -> None:
    """Register the landed position for retention, after the commit: every event up to
    ``ends`` is in the table now (or there was none), so retention may remove it. The
    table's ``max(ulid)`` stays the cursor of record; this copy only holds retention back.
    """
    if "save_cursor" not in info.names:
        return  # SQL Server, or a feed without retention: no connection for nothing
    with open_backend(options.connection, options.changefeed_schema) as backend:
        backend.save_cursors(info, consumer, ends)


def _landing_options(source_options: Mapping[str, str]) -> FeedOptions:
    lowered = {str(k).lower() for k in source_options}
    fixed = sorted(k for k in lowered if k in _NOT_FOR_LANDING)
    if fixed:
        raise ChangefeedSourceError(
            f"land() sets startingOffsets and endingOffsets itself (from the table and the "
            f"source's safe points); remove {', '.join(fixed)}"
        )
    options = parse_options(source_options)
    if options.starting_position.kind == "now":
        raise ChangefeedSourceError(
            "land() cannot start at 'now': the table is the landing's only record of where it "
            "is, and a shard without landed rows would start again at a later 'now' on the next "
            "run (skipping events). Use a timestamp or ULID, e.g. "
            "startingPosition=2024-05-01T00:00:00Z"
        )
    return options


def _shards(options: FeedOptions, listed: list[int], heads: Mapping[int, bytes]) -> list[int]:
    if options.shards is not None:
        return list(options.shards)
    return sorted(set(listed) | set(heads))


def _source_frame(
    spark: Any,
    source_options: Mapping[str, str],
    info: SourceFeed,
    cursors: Mapping[int, bytes],
    ends: Mapping[int, bytes],
) -> Any:
    import json

    # The schema is known: passing it spares Spark a Python worker that would ask the
    # database again (the reader still checks it against the registry).
    reader = spark.read.format("changefeed").schema(info.layout().spark_schema())
    for key, value in source_options.items():
        reader = reader.option(key, value)
    return (
        reader.option("startingOffsets", json.dumps(encode_offset(dict(cursors))))
        .option("endingOffsets", json.dumps(encode_offset(dict(ends))))
        .load()
    )
