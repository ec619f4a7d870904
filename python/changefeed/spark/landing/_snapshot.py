"""Snapshots (docs/protocol.md section 12): every existing key of the source, landed as
events with the ULIDs of one block the database reserved, while writers keep writing.

A request (``snapshot_begin:<feed>``, :func:`request_snapshot`) reserves one empty block
``[B, B + 2^36)`` in a shard. The landing that finds it pending (:func:`execute`):

1. waits until the shard's safe point reaches ``B - 1`` (no event below ``B`` can commit
   any more), then lands the shard's events up to ``B - 1``;
2. reads the source in primary-key chunks, each a Spark task with a connection of its own,
   and gives row ``r`` of chunk ``j`` the ULID ``B + j * 2^24 + r`` (:func:`snapshot_ulid`);
   groups of chunks are written as landed batches, in chunk order (on a local parquet
   table by the tasks themselves, :mod:`._parquet_files`; else by Spark's writer);
3. calls ``snapshot_finish``; live events (all above the block) land next as usual.

The landed table is the record of progress: after a kill, its head of the shard lies in
the block, its chunk number says which chunks committed and its key where to go on
(:func:`resume_point`); the rest is planned again from there.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from changefeed.client import ZERO_ULID
from changefeed.dialects import dialect_named
from changefeed.dialects.snapshot_types import SnapshotRequest, snapshot_table
from changefeed.spark import is_connect
from changefeed.spark.feedtable import OPERATION_COLUMN
from changefeed.spark.landing._evolution import landed_schema
from changefeed.spark.landing._snapshot_plan import (
    CHUNK_ROWS,
    chunk_frame,
    chunk_reader,
    group,
    plan,
    resume_point,
)
from changefeed.spark.source import ChangefeedSourceError, SourceFeed, to_hex
from changefeed.ulid import previous_one

LOG = logging.getLogger("changefeed.snapshot")

#: How long the barrier (step 1) waits for writes allocated below the block.
BARRIER_TIMEOUT = 120.0


@dataclass(frozen=True)
class SnapshotProgress:
    """Where a running snapshot is, after each committed batch."""

    snapshot_id: int
    shard: int
    rows: int
    rows_estimated: int
    chunks_done: int
    chunks: int
    seconds: float
    finished: bool = False

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        """From the rate so far and the chunks left (each about the same size)."""
        if self.finished:
            return 0.0
        if self.chunks_done == 0 or self.seconds <= 0:
            return None
        return self.seconds * (self.chunks - self.chunks_done) / self.chunks_done

    def line(self) -> str:
        left = self.seconds_left
        eta = "done" if self.finished else (
            "time left unknown" if left is None else f"about {_duration(left)} left"
        )  # fmt: skip
        return (
            f"snapshot {self.snapshot_id} shard {self.shard}: {self.rows:,} rows "
            f"(~{self.rows_estimated:,} estimated), chunks {self.chunks_done}/{self.chunks}, "
            f"{self.rows_per_second:,.0f} rows/s, {eta}"
        )


ProgressCallback = Callable[[SnapshotProgress], None]


class SnapshotRequestFailed(ChangefeedSourceError):
    """A pending request that cannot run (protocol 12.3, "A request that cannot run"):
    its own statements fail (a key bound the key's type cannot hold, a shard expression
    the source refuses). The landing logs it and lands the feed's live events on."""

    def __init__(self, message: str, request: SnapshotRequest) -> None:
        super().__init__(message)
        self.request = request


def cancel_command(options: Any, snapshot_id: int) -> str:
    """The command that cancels request ``snapshot_id`` (:func:`cancel`), as a user types
    it: the connection as the options give it, its password left out."""
    return (
        f"changefeed snapshot --connection '{options.connection.display}' --feed "
        f"{options.feed} --cancel {snapshot_id}"
    )


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


# -- Requests -----------------------------------------------------------------------


def key_bound(text: str | None, names: Sequence[str], what: str) -> str | None:
    """A ``--key-from``/``--key-to`` value as the JSON array ``snapshot_begin`` takes: a
    JSON array, or for a one-column key also a bare value (``42`` or ``abc``)."""
    if text is None:
        return None
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        value = stripped
    if not isinstance(value, list):
        if len(names) != 1:
            raise ChangefeedSourceError(
                f"{what} must be a JSON array of {len(names)} values (the key "
                f"{', '.join(names)}), e.g. {json.dumps(['...'] * len(names))}; got {text!r}"
            )
        value = [value]
    if len(value) != len(names) or any(v is None or isinstance(v, dict | list) for v in value):
        raise ChangefeedSourceError(
            f"{what} must be a JSON array of {len(names)} value(s) (the key "
            f"{', '.join(names)}), none null; got {text!r}"
        )
    return json.dumps(value)


def wait_for_barrier(
    backend: Any, info: SourceFeed, request: SnapshotRequest, timeout: float = BARRIER_TIMEOUT
) -> None:
    """Step 1: until the shard's safe point reaches the block (no event below it can
    commit any more, S1). A write allocated below the block and never finished keeps it
    closed until it is reaped, burned or tombstoned."""
    target = previous_one(request.first_ulid)
    deadline = time.monotonic() + timeout
    while True:
        backend.move_outbox(info, [request.shard])
        now = backend.safe_points(info, [request.shard])[request.shard]
        if now >= target:
            return
        if time.monotonic() > deadline:
            raise ChangefeedSourceError(
                f"snapshot {request.snapshot_id} of feed {info.feed_id} shard {request.shard}: "
                f"the safe point {to_hex(now)} did not reach the snapshot's block "
                f"{to_hex(request.first_ulid)} within {timeout:.0f} s: a write allocated before "
                "the request is still pending; let it finish (or tombstone it) and land again"
            )
        time.sleep(0.05)


# -- Executing a request (the landing's side) --------------------------------------------


def execute(
    landing: Any,
    backend: Any,
    info: SourceFeed,
    request: SnapshotRequest,
    on_stage: Callable[[str, Mapping[str, Any]], None] | None,
    on_progress: ProgressCallback | None,
) -> int:
    """Run one request to its end in ``landing`` (a :class:`Landing`, the table's only
    writer): the steps of the module doc. Returns the rows it landed in this call."""
    from changefeed.spark.landing import _format, _parquet_files

    started = time.monotonic()
    shard = request.shard
    wait_for_barrier(backend, info, request)
    _, known = landing._run(
        None, on_stage, only=[shard], caps={shard: previous_one(request.first_ulid)}
    )
    spark, table = landing.spark, landing.table
    fmt = _format.choose_format(spark, table, landing.table_format, exists=True)
    heads, last_batch = landing.feed_table.committed_heads([shard], fmt)
    head = heads.get(shard)
    in_block = head is not None and request.first_ulid <= head <= request.last_ulid
    head_key = _head_key(spark, table, info, shard, head) if in_block else None
    point = resume_point(request, head, head_key)
    if point is None:
        LOG.warning(
            "snapshot %s of feed %s shard %s: table %s already holds events above its block; "
            "not executed here (request a new snapshot for this table; if no landing is to "
            "execute it, cancel it: %s)",
            request.snapshot_id, info.feed_id, shard, table.text,
            cancel_command(landing.options, request.snapshot_id),
        )  # fmt: skip
        return 0
    first, lower, inclusive = point
    upper = tuple(str(v) for v in request.key_to) if request.key_to is not None else None
    db = dialect_named(info.dialect).snapshot()
    chunk_rows = landing.snapshot_chunk_rows
    cores = _cores(spark)
    per_batch = max(1, landing.snapshot_batch_rows // chunk_rows, cores)
    try:
        # The plan runs the request's own predicate (its bounds, the shard expression) on
        # the source: what fails here fails on every run, so it fails this request alone.
        reader = db.reader(info, db.shard_expression(backend.conn, info))
        chunks, estimate = plan(
            backend.conn, reader, shard, first, lower, inclusive, upper, chunk_rows, cores
        )
    except Exception as exc:
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise SnapshotRequestFailed(
            f"snapshot {request.snapshot_id} of feed {info.feed_id} shard {shard} cannot run: "
            f"{cause}. The feed's live events land on without it (past its block, so no landing "
            f"of {table.text} executes it any more); cancel it with "
            f"`{cancel_command(landing.options, request.snapshot_id)}` and request a new one",
            request,
        ) from exc
    read = chunk_reader(
        landing.options, reader, shard, request.first_ulid, known.operation, known.payload
    )
    schema = landed_schema(info.layout().spark_schema(), known.payload)
    if known.operation:
        schema = schema.add(OPERATION_COLUMN, "string", True)
    files = _parquet_files.files_location(spark, table, fmt, landing.snapshot_writer)
    rows, batch, done = 0, last_batch, 0
    for chunk_group in group(chunks, per_batch):
        if files is not None:
            # the rows of the files the tasks wrote and closed (no job to count them)
            landed = _parquet_files.write_batch(spark, chunk_group, read, table, batch + 1, files)
        else:
            frame = chunk_frame(spark, chunk_group, read, schema)
            _format.write_batch(frame, table, batch + 1, fmt)
            landed = _format.count_batch(spark, table, batch + 1)
        if landed:
            batch += 1
        rows += landed
        done += len(chunk_group)
        progress = SnapshotProgress(
            request.snapshot_id, shard, rows, estimate, done, len(chunks),
            time.monotonic() - started,
        )  # fmt: skip
        LOG.info(progress.line())
        if on_progress is not None:
            on_progress(progress)
        if on_stage is not None:
            on_stage("snapshot_committed", {
                "table": table.text, "snapshot_id": request.snapshot_id, "shard": shard,
                "batch": batch if landed else None, "chunks": [c.index for c in chunk_group],
                "rows": landed,
            })  # fmt: skip
    total = rows
    if first > 0:  # resumed: the rows of earlier runs are in the table
        total = _landed_rows(spark, table, request)
    db.finish(backend.conn, info, request, total)
    final = SnapshotProgress(
        request.snapshot_id, shard, rows, estimate, len(chunks), len(chunks),
        time.monotonic() - started, finished=True,
    )  # fmt: skip
    LOG.info(final.line())
    if on_progress is not None:
        on_progress(final)
    return rows


def source_frame(
    spark: Any, source_options: Mapping[str, str], *, chunk_rows: int = CHUNK_ROWS
) -> Any:
    """Every row of the feed's source table, read as a snapshot reads it (step 2 above):
    in primary-key chunks of about ``chunk_rows`` rows, each a Spark task with a
    connection of its own, without blocking writers. Each chunk is one statement, so the
    frame is not one snapshot of the table; each row is read once per evaluation, and the
    frame reads the source again whenever it is evaluated (persist it to read it once).

    Columns: the landed layout with a payload (``shard_id`` 0, a ULID per row, the key
    columns, ``payload``), the values typed as a landing types them."""
    from changefeed.spark.source import open_backend, parse_options

    options = parse_options({**source_options, "payload": "true"})
    with open_backend(options.connection, options.changefeed_schema) as backend:
        info = backend.describe(options.feed, True)
        reader = dialect_named(info.dialect).snapshot().reader(info, None)
        chunks, _ = plan(backend.conn, reader, 0, 0, None, True, None, chunk_rows, _cores(spark))
    read = chunk_reader(options, reader, 0, ZERO_ULID)
    return chunk_frame(spark, chunks, read, info.layout().spark_schema())


def _cores(spark: Any) -> int:
    """Spark's default parallelism: the tasks a batch's job can run at once. Spark Connect
    has no SparkContext to ask: there, the partitions of a range Spark splits by it (a
    small job), unless spark.default.parallelism is set."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    from pyspark.sql import functions as F

    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    split = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).distinct()
    return max(1, int(split.count()))


def _head_key(spark: Any, table: Any, info: SourceFeed, shard: int, head: bytes | None) -> Any:
    from pyspark.sql import functions as F

    found = (
        spark.table(table.sql)
        .where((F.col("shard_id") == shard) & (F.col("ulid") == F.lit(head)))
        .select(*[F.col(k.name) for k in info.keys])
        .collect()
    )
    return tuple(found[0]) if found else None


def _landed_rows(spark: Any, table: Any, request: SnapshotRequest) -> int:
    from pyspark.sql import functions as F

    return int(
        spark.table(table.sql)
        .where(
            (F.col("shard_id") == request.shard)
            & (F.col("ulid") >= F.lit(request.first_ulid))
            & (F.col("ulid") <= F.lit(request.last_ulid))
        )
        .count()
    )


def request(
    source_options: Mapping[str, str],
    *,
    shard: int = 0,
    key_from: str | None = None,
    key_to: str | None = None,
) -> SnapshotRequest:
    """Request a snapshot of the feed of ``source_options`` (the landing's options): the
    whole table, or the keys from ``key_from`` to ``key_to`` (inclusive; a JSON array of
    the key's values, or a bare value for a one-column key). The next landing of the feed
    executes it. Arguments are checked before anything is written."""
    from changefeed.spark.source import open_backend, parse_options

    options = parse_options(source_options)
    if not isinstance(shard, int) or isinstance(shard, bool) or not -(2**31) <= shard < 2**31:
        raise ChangefeedSourceError(f"shard must be a 32-bit integer, got {shard!r}")
    with open_backend(options.connection, options.changefeed_schema) as backend:
        info = backend.describe(options.feed, True)
        snapshot_table(info)
        names = [k.name for k in info.keys]
        bounds = key_bound(key_from, names, "key_from"), key_bound(key_to, names, "key_to")
        conn = backend.conn
        db = dialect_named(info.dialect).snapshot()
        if db.shard_expression(conn, info) is None:
            others = sorted(set(backend.shards(info)) - {shard})
            if others:
                raise ChangefeedSourceError(
                    f"feed {info.feed_id} has events in shard(s) {', '.join(map(str, others))} "
                    f"besides {shard}, and its writers choose shards by a rule the database does "
                    "not know (no capture: trigger with a shard expression), so a snapshot of "
                    f"shard {shard} would give other shards' keys a second history; snapshots "
                    "support single-shard feeds and capture: trigger feeds with a shard expression"
                )
        return db.request(conn, info, shard, *bounds)


def cancel(source_options: Mapping[str, str], snapshot_id: int) -> SnapshotRequest:
    """Cancel the pending request ``snapshot_id`` of the feed of ``source_options``: it is
    marked finished with 0 rows (``snapshot_finish``, protocol 12.1), so no landing
    executes it; rows a landing already landed for it stay. Refuses a request that is not
    pending."""
    from changefeed.spark.source import open_backend, parse_options

    options = parse_options(source_options)
    with open_backend(options.connection, options.changefeed_schema) as backend:
        info = backend.describe(options.feed, False)
        snapshot_table(info)
        conn = backend.conn
        db = dialect_named(info.dialect).snapshot()
        found = [r for r in db.pending_requests(conn, info) if r.snapshot_id == snapshot_id]
        if not found:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} has no pending snapshot request {snapshot_id}: it finished, "
                f"was cancelled or never existed (see the table {info.info.q('snapshot')})"
            )
        db.finish(conn, info, found[0], 0)
        return found[0]
