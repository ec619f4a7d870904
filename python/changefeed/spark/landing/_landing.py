"""One landing of a feed into a Spark table, run after run (the steps of the package doc).

A :class:`Landing` runs the landing again and again in one Spark session. Its first run
reads everything from the table (cursors, batch number), as ``land()`` always does. Each
later run of the same object starts from what its own last commit left, because it is
the table's only writer (F4): the batch number is the one it wrote plus one, and each
shard's cursor is the end of the range it read (a safe point: no event at or below it
can appear later, so reading on from there gives the same events as reading on from the
table's ``max(ulid)``). A failed run forgets that, so the next one reads the table again.
A warm run that finds nothing new starts no Spark job and opens no connection: it costs
a handful of index probes on the kept one.

The only writer is enforced, not assumed: every connection a landing opens first takes
the table's writer lock in the source database (:meth:`Backend.try_writer_lock`, held
until the connection closes, also by a killed process), and a landing that finds it
taken fails at once naming the holder. A run that reads the table also checks that it
records this feed (:func:`_format.check_identity`).

Warm runs of at most :data:`DRIVER_READ_LIMIT` events read them on the driver with the
source's own page reader and Arrow conversion, and write them from that Arrow table: a
small batch then costs one Spark job (the write) instead of three (read, write, count),
and none into a parquet table on a local Spark's filesystem, where the driver writes the
batch's file itself and registers its partition (:mod:`._parquet_files`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from changefeed.client.core import ZERO_ULID
from changefeed.dialects import dialect_named
from changefeed.spark.feedtable import (
    FeedTable,
    table_properties,
    with_operation,
    with_operation_arrow,
)
from changefeed.spark.landing import (
    _format,
    _parquet_files,
    _snapshot,
    _snapshot_plan,
)
from changefeed.spark.landing._evolution import apply as apply_evolution
from changefeed.spark.landing._evolution import (
    conform_arrow,
    conform_frame,
    landed_schema,
    payload_type,
    same_shape,
)
from changefeed.spark.source import (
    LANDING_FIX,
    Backend,
    BatchBuilder,
    ChangefeedSourceError,
    FeedOptions,
    SourceFeed,
    check_not_behind,
    encode_offset,
    open_backend,
    parse_options,
    read_range,
    register,
)

LOG = logging.getLogger("changefeed.landing")

#: ``on_stage(stage, details)`` is called at "planned" (cursors, safe points and batch
#: fixed; nothing written yet) and "committed" (the batch is registered); at
#: "schema_changed" (the table follows its source's columns from ``batch`` on: its new
#: schema ``version`` and the ``changes`` in words, before the batch); for snapshots
#: at "snapshot_committed" (a batch of chunks) and "snapshot_failed" (a request that
#: cannot run, :class:`._snapshot.SnapshotRequestFailed`; the run goes on).
StageCallback = Callable[[str, Mapping[str, Any]], None]

#: The most events a warm run reads on the driver; a larger range (a backlog after a
#: pause) goes through ``format("changefeed")`` on the executors.
DRIVER_READ_LIMIT = 20_000

_NOT_FOR_LANDING = ("startingoffsets", "endingoffsets")


@dataclass(frozen=True)
class LandingResult:
    """What one landing run did. ``batch`` is ``None`` when there were no new live events;
    ``events``, ``batch`` and ``seconds`` are the live events' batch. ``snapshots`` are the
    ids of the snapshot requests the run executed before it (in order) and
    ``snapshot_rows`` the rows they landed in this run."""

    table: str
    batch: int | None
    events: int
    cursors: dict[int, bytes] = field(repr=False)
    safe_points: dict[int, bytes] = field(repr=False)
    seconds: float
    snapshots: tuple[int, ...] = ()
    snapshot_rows: int = 0

    @property
    def idle(self) -> bool:
        """Whether the run landed nothing at all: no live events and no snapshot."""
        return self.batch is None and not self.snapshots

    def summary(self) -> str:
        """One line for a log: the snapshots, the batch, its events and shards, the rate.

        >>> LandingResult("l.t", 3, 3, {}, {0: b""}, 10.0).summary()
        'l.t: batch 3, 3 events from 1 shard in 10.0 s (0.3 events/s)'
        >>> LandingResult("l.t", None, 0, {}, {0: b"", 1: b""}, 0.25).summary()
        'l.t: nothing new (2 shards, 0.2 s)'
        >>> LandingResult("l.t", None, 0, {}, {0: b""}, 0.1, (7,), 5002).summary()
        'l.t: snapshot 7 landed 5,002 rows; no new live events (1 shard, 0.1 s)'
        >>> LandingResult("l.t", 4, 1, {}, {0: b""}, 2.0, (7, 8), 1).summary()
        'l.t: snapshots 7, 8 landed 1 row; batch 4, 1 event from 1 shard in 2.0 s (0.5 events/s)'
        """
        shards = _counted(len(self.safe_points), "shard")
        prefix = ""
        if self.snapshots:
            ids = ", ".join(str(i) for i in self.snapshots)
            noun = "snapshot" if len(self.snapshots) == 1 else "snapshots"
            prefix = f"{noun} {ids} landed {_counted(self.snapshot_rows, 'row')}; "
        if self.batch is None:
            nothing = "no new live events" if self.snapshots else "nothing new"
            return f"{self.table}: {prefix}{nothing} ({shards}, {self.seconds:.1f} s)"
        return (
            f"{self.table}: {prefix}batch {self.batch}, {_counted(self.events, 'event')} from "
            f"{shards} in {self.seconds:.1f} s ({_rate(self.events, self.seconds)} events/s)"
        )


def _counted(count: int, noun: str) -> str:
    """``1 event``, ``5,002 events``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _rate(events: int, seconds: float) -> str:
    """Events per second, with two significant digits below 10 (3 events in 10 s is 0.3,
    not 0).

    >>> _rate(3, 10.0), _rate(1520, 0.4), _rate(5, 0.0)
    ('0.3', '3,800', 'inf')
    """
    if seconds <= 0:
        return "inf"
    rate = events / seconds
    return f"{rate:.2g}" if rate < 10 else f"{rate:,.0f}"


@dataclass
class _Known:
    """What this landing's last commit left in the table (valid while it is the only writer)."""

    schema: Any
    fmt: str
    cursors: dict[int, bytes]
    last_batch: int
    registered: dict[int, bytes]
    operation: bool
    #: the table's payload struct where a batch read from the source must be given its
    #: shape (:func:`._evolution.conform_frame`); None where it lands as read
    payload: Any = None


class _ColumnsChanged(ChangefeedSourceError):
    """The source's payload columns changed between the run's first look at them and its
    read: the run stops before it writes and starts again."""


#: Runs started again in a row because the source's columns changed during each.
COLUMN_RETRIES = 3


class Landing:
    """Runs of one landing (``source_options`` into ``target_table``) in one Spark session.

    ``keep_connection``: hold one database connection across runs (continuous landing);
    otherwise each run opens and closes its own. ``table_format``: see :func:`land`.
    ``snapshot_chunk_rows``: source rows per snapshot chunk (one Spark task);
    ``snapshot_batch_rows``: rows per landed snapshot batch (one commit).
    ``snapshot_writer``: ``"auto"`` (the default) has the snapshot's tasks write a parquet
    table's batches as parquet files themselves when the table lies on the local
    filesystem of a local Spark, and Spark's writer write them elsewhere; ``"spark"``
    always uses Spark's writer. Both land the same rows. Call :meth:`close` at the end.
    """

    def __init__(
        self,
        spark: Any,
        source_options: Mapping[str, str],
        target_table: str,
        *,
        keep_connection: bool = False,
        table_format: str | None = None,
        snapshot_chunk_rows: int = _snapshot_plan.CHUNK_ROWS,
        snapshot_batch_rows: int = _snapshot_plan.BATCH_ROWS,
        snapshot_writer: str = "auto",
    ) -> None:
        if snapshot_writer not in _parquet_files.WRITERS:
            raise ChangefeedSourceError(
                f"snapshot_writer must be one of {', '.join(map(repr, _parquet_files.WRITERS))}, "
                f"got {snapshot_writer!r}"
            )
        if snapshot_chunk_rows < 1 or snapshot_chunk_rows >= _snapshot_plan.CHUNK_LIMIT:
            raise ChangefeedSourceError(
                f"snapshot_chunk_rows must be in [1, 2^{_snapshot_plan.CHUNK_BITS}), got "
                f"{snapshot_chunk_rows}"
            )
        if snapshot_batch_rows < 1:
            raise ChangefeedSourceError(
                f"snapshot_batch_rows must be a positive number of rows, got {snapshot_batch_rows}"
            )
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self.snapshot_batch_rows = snapshot_batch_rows
        self.snapshot_writer = snapshot_writer
        self.spark = spark
        self.source_options = dict(source_options)
        self.options = _landing_options(source_options)
        self.table = _format.parse_table(spark, target_table)
        self.feed_table = FeedTable(spark, self.table)
        self.consumer = self.options.consumer or self.table.text
        self.keep_connection = keep_connection
        self.table_format = table_format
        self._backend: Backend | None = None
        self._known: _Known | None = None
        self._identity: _format.FeedIdentity | None = None
        self._location: tuple[Path | None] | None = None
        _format.check_partition_management(spark)
        register(spark)

    def close(self) -> None:
        if self._backend is not None:
            backend, self._backend = self._backend, None
            backend.close()

    def run(
        self,
        *,
        on_stage: StageCallback | None = None,
        on_progress: _snapshot.ProgressCallback | None = None,
    ) -> LandingResult:
        """One run: at most one new batch of live events, after the pending snapshot
        requests of the feed (each run to its end, protocol 12.3; ``on_progress`` hears of
        each of their batches). Any failure makes the next run re-read the table."""
        known, self._known = self._known, None
        try:
            attempted = self._snapshots(on_stage, on_progress)
            if attempted:
                known = None  # a request's step 2 landed events, even one that then failed
            result, self._known = self._run(known, on_stage)
            landed = [(i, rows) for i, rows in attempted if rows is not None]
            if landed:
                executed = tuple(snapshot_id for snapshot_id, _ in landed)
                rows = sum(count for _, count in landed)
                result = replace(result, snapshots=executed, snapshot_rows=rows)
        except BaseException:
            self.close()  # a connection in an unknown state is not reused
            raise
        if not self.keep_connection:
            self.close()
        return result

    def _snapshots(
        self, on_stage: StageCallback | None, on_progress: _snapshot.ProgressCallback | None
    ) -> list[tuple[int, int | None]]:
        """Execute the feed's pending snapshot requests; ``(snapshot_id, rows landed)`` of
        each, in order, with ``None`` for one that failed."""
        backend = self._connection()
        info = backend.describe(self.options.feed, self.options.payload)
        pending = dialect_named(backend.dialect).snapshot().pending_requests(backend.conn, info)
        requests = [
            r for r in pending if self.options.shards is None or r.shard in self.options.shards
        ]
        if requests and info.payload is None:
            _snapshot.LOG.warning(
                "feed %s has %d pending snapshot request(s); landing %s does not execute them "
                "because it lands without payload (snapshot rows are source rows)",
                info.feed_id, len(requests), self.table.text,
            )  # fmt: skip
            return []
        ran: list[tuple[int, int | None]] = []
        for request in requests:
            try:
                rows = _snapshot.execute(self, backend, info, request, on_stage, on_progress)
                ran.append((request.snapshot_id, rows))
            except _snapshot.SnapshotRequestFailed as failed:
                ran.append((request.snapshot_id, None))
                # One request that cannot run stops neither the others nor the live events
                # (protocol 12.3): they land past its block, after it.
                _snapshot.LOG.error("%s", failed)
                if on_stage is not None:
                    on_stage("snapshot_failed", {
                        "table": self.table.text, "snapshot_id": request.snapshot_id,
                        "shard": request.shard, "error": str(failed),
                    })  # fmt: skip
        return ran

    def check_target(self) -> None:
        """Refuse, before anything is requested or written, a target table this landing
        would refuse: another feed's, or one with other columns or another format."""
        backend = self._connection()
        info = backend.describe(self.options.feed, self.options.payload)
        if self.feed_table.exists():
            schema = _format.feed_table_schema(info.layout().spark_schema())
            self._check_existing(backend, schema, info)

    def _check_existing(
        self, backend: Backend, schema: Any, info: SourceFeed
    ) -> tuple[str, bool, _format.TableCheck]:
        """An existing table's format, whether it records no feed yet, and what
        :func:`._format.check_table` found (nothing is changed here)."""
        fmt = _format.choose_format(self.spark, self.table, self.table_format, exists=True)
        properties = table_properties(self.spark, self.table.sql)
        unrecorded = _format.check_identity(properties, self.table, self._feed_identity(backend))
        check = _format.check_table(
            self.spark, self.table, schema, fmt, properties, self.options.feed, _numbers(info)
        )
        return fmt, unrecorded, check

    def _connection(self) -> Backend:
        if self._backend is None:
            self._backend = _locked_backend(self.options, self.table.text)
        return self._backend

    def _feed_identity(self, backend: Backend) -> _format.FeedIdentity:
        if self._identity is None:
            source = f"{backend.source_identity()}/{self.options.changefeed_schema}"
            self._identity = _format.FeedIdentity(self.options.feed, source)
        return self._identity

    def _run(
        self,
        known: _Known | None,
        on_stage: StageCallback | None,
        *,
        only: Sequence[int] | None = None,
        caps: Mapping[int, bytes] | None = None,
    ) -> tuple[LandingResult, _Known]:
        """One batch. ``only``: land these shards only; ``caps``: per shard, land no event
        above it (a snapshot's step 2 lands the events below its block, protocol 12.3).
        Started again when the source's columns change during it (nothing written)."""
        for _ in range(COLUMN_RETRIES):
            try:
                return self._run_once(known, on_stage, only=only, caps=caps)
            except _ColumnsChanged:
                known = None
        raise ChangefeedSourceError(
            f"the columns of feed {self.options.feed}'s source table changed during each of "
            f"{COLUMN_RETRIES} runs in a row, between the run's first look at them and its "
            "read; nothing was written. Land again once the table's changes are done"
        )

    def _run_once(
        self,
        known: _Known | None,
        on_stage: StageCallback | None,
        *,
        only: Sequence[int] | None,
        caps: Mapping[int, bytes] | None,
    ) -> tuple[LandingResult, _Known]:
        started = time.monotonic()
        options, table = self.options, self.table
        backend = self._connection()
        info = backend.describe(options.feed, options.payload)
        schema = _format.feed_table_schema(info.layout().spark_schema())
        listed = backend.shards(info) if options.shards is None else list(options.shards)
        if known is not None and known.schema == schema:
            heads, last_batch, fmt = known.cursors, known.last_batch, known.fmt
            operation, payload = known.operation, known.payload
        elif self.feed_table.exists():
            fmt, unrecorded, check = self._check_existing(backend, schema, info)
            if unrecorded:
                _format.record_identity(self.spark, table, self._feed_identity(backend))
            heads, last_batch = self.feed_table.committed_heads(listed, fmt)
            operation, table_schema = check.operation, check.schema
            if check.evolution is not None:
                table_schema = self._evolve(check, fmt, last_batch + 1, on_stage)
            payload = _payload_shape(table_schema, schema, fmt)
            known = None
        else:
            fmt = _format.choose_format(self.spark, table, self.table_format, exists=False)
            _format.create_table(
                self.spark, table, schema, fmt, self._feed_identity(backend), _numbers(info)
            )
            heads, last_batch, known, operation, payload = {}, 0, None, True, None
        shards = list(only) if only is not None else _shards(options, listed, heads)
        start = options.starting_position.fixed_cursor()
        cursors = {shard: max(heads.get(shard, ZERO_ULID), start) for shard in shards}
        # Before the probe below, which reads the feed table directly: past the horizon it
        # would find nothing and call the landing caught up, silently.
        check_not_behind(backend, info, cursors, f"landing {table.text}", LANDING_FIX)
        if options.move_outbox:
            backend.move_outbox(info, shards)
        safe_points = backend.safe_points(info, shards)
        if caps:
            safe_points = {s: min(p, caps.get(s, p)) for s, p in safe_points.items()}
        ends = {shard: max(safe_points[shard], cursors[shard]) for shard in shards}
        # The cursor is the last landed event, the safe point the end of its block and
        # beyond: probe for one event first, so a run with nothing new starts no Spark job.
        pending = [
            shard
            for shard in shards
            if ends[shard] > cursors[shard]
            and backend.has_events(info, shard, cursors[shard], ends[shard])
        ]
        # The payload is read by column name: columns that changed since this run's describe,
        # before its safe points, would land a batch short of them; looked at again after
        # the safe points, a change makes the run start again (protocol 11.11, E1).
        again = backend.describe(options.feed, True) if pending and info.payload else None
        if again is not None and again.payload != info.payload:
            raise _ColumnsChanged()
        batch = last_batch + 1
        details = {"table": table.text, "batch": batch, "cursors": cursors, "safe_points": ends}
        if on_stage is not None:
            on_stage("planned", details)
        registered = known.registered if known is not None else {}
        if not pending:
            if ends != registered:
                self._register(backend, info, ends)
            after = _Known(schema, fmt, ends, last_batch, ends, operation, payload)
            return LandingResult(
                table.text, None, 0, cursors, ends, time.monotonic() - started
            ), after

        starts = {shard: cursors[shard] for shard in pending}
        stops = {shard: ends[shard] for shard in pending}
        arrow = None
        if known is not None:
            arrow = _driver_read(backend, info, starts, stops, options.page_size)
        if arrow is not None:
            if payload is not None:
                arrow = conform_arrow(arrow, payload)
            location = self._files_location(fmt)
            if location is not None and arrow.num_rows:
                rows = with_operation_arrow(arrow, snapshot=False) if operation else arrow
                _parquet_files.write_driver_batch(self.spark, rows, table, batch, location)
            else:
                frame = self.spark.createDataFrame(
                    arrow, schema=landed_schema(info.layout().spark_schema(), payload)
                )
                frame = with_operation(frame, snapshot=False) if operation else frame
                _format.write_batch(frame, table, batch, fmt)
            events = arrow.num_rows
        else:
            frame = _source_frame(self.spark, self.source_options, info, starts, stops)
            frame = conform_frame(frame, payload) if payload is not None else frame
            frame = with_operation(frame, snapshot=False) if operation else frame
            _format.write_batch(frame, table, batch, fmt)
            events = _format.count_batch(self.spark, table, batch)
        self._register(backend, info, ends)
        if on_stage is not None:
            on_stage("committed", {**details, "events": events})
        result = LandingResult(
            table.text, batch if events else None, events, cursors, ends,
            time.monotonic() - started,
        )  # fmt: skip
        after = _Known(schema, fmt, ends, batch if events else last_batch, ends, operation, payload)
        return result, after

    def _evolve(
        self, check: _format.TableCheck, fmt: str, batch: int, on_stage: StageCallback | None
    ) -> Any:
        """Make the table follow its source's payload columns from ``batch`` on (the next
        batch); its schema after."""
        assert check.evolution is not None
        version = apply_evolution(
            self.spark, self.table, fmt, check.evolution, batch, check.properties, check.schema
        )
        if version is not None:
            text = check.evolution.text()
            LOG.warning("table %s: schema version %d from batch %d: %s",
                        self.table.text, version.version, batch, text)  # fmt: skip
            if on_stage is not None:
                on_stage("schema_changed", {"table": self.table.text, "version": version.version,
                                            "batch": batch, "changes": text})  # fmt: skip
        return self.spark.table(self.table.sql).schema

    def _files_location(self, fmt: str) -> Path | None:
        """Where this landing writes its warm batches as parquet files itself (a parquet
        table on a local Spark's filesystem, :mod:`._parquet_files`; else ``None``: Spark's
        writer). Asked once: the table's location does not move under its only writer,
        whose first ask also clears the staging directories of killed attempts."""
        if self._location is None:
            found = _parquet_files.files_location(self.spark, self.table, fmt, self.snapshot_writer)
            self._location = (found,)
        return self._location[0]

    def _register(self, backend: Backend, info: SourceFeed, ends: Mapping[int, bytes]) -> None:
        """Register the landed position for retention, after the commit: every event up to
        ``ends`` is in the table now (or there was none), so retention may remove it. The
        table's ``max(ulid)`` stays the cursor of record; this copy only holds retention back.
        """
        if "save_cursor" in info.names:  # else SQL Server, or a feed without retention
            backend.save_cursors(info, self.consumer, ends)


def _numbers(info: SourceFeed) -> dict[str, int] | None:
    """The source's number of each payload column, where the database gave them all."""
    if info.payload is None or any(c.number is None for c in info.payload):
        return None
    return {c.name: int(c.number) for c in info.payload if c.number is not None}


def _payload_shape(table_schema: Any, source_schema: Any, fmt: str) -> Any:
    """The table's payload struct where a batch read with the source's columns must be
    given its shape (a column the source dropped, another order), else None."""
    table_payload, source_payload = payload_type(table_schema), payload_type(source_schema)
    if table_payload is None or source_payload is None:
        return None
    if same_shape(table_payload, source_payload, fmt):
        return None
    return table_payload


def _driver_read(
    backend: Backend,
    info: SourceFeed,
    starts: Mapping[int, bytes],
    ends: Mapping[int, bytes],
    page_size: int,
) -> Any:
    """The events of ``(starts, ends]`` as one Arrow table, read here on the driver, or
    ``None`` past :data:`DRIVER_READ_LIMIT` events (then Spark's executors read them)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    builder = BatchBuilder(info.layout())
    batches, total = [], 0
    for shard in sorted(starts):
        for page in read_range(backend, info, shard, starts[shard], ends[shard], page_size):
            total += len(page)
            if total > DRIVER_READ_LIMIT:
                return None
            batches.append(builder.build(page))
    return pa.Table.from_batches(batches, schema=builder.schema)


def check_source(source_options: Mapping[str, str], target_table: str | None = None) -> None:
    """Check the options, the connection (and its driver) and the feed, with no Spark,
    and with ``target_table`` written ``database.table`` that no landing of it runs (its
    writer lock is free; taken and released here): a landing checks them too, but only
    after its caller started Spark, which takes half a minute, so ``changefeed land``
    calls this first to report a typo or a running landing at once.
    Raises :class:`ChangefeedSourceError` naming the cause."""
    options = _landing_options(source_options)
    # Named as the landing names it, so that the lock is the landing's; without Spark a
    # bare table name has no database: the landing itself checks it.
    table = None if target_table is None else _format.parse_qualified_table(target_table)
    if table is not None:
        backend = _locked_backend(options, table.text)
    else:
        backend = open_backend(options.connection, options.changefeed_schema)
    with backend:
        backend.describe(options.feed, options.payload)


def _locked_backend(options: FeedOptions, table: str) -> Backend:
    """A connection holding ``table``'s writer lock until it closes (protocol 11, F4)."""
    backend = open_backend(options.connection, options.changefeed_schema)
    try:
        holder = backend.try_writer_lock(table)
    except BaseException:
        backend.close()
        raise
    if holder is not None:
        backend.close()
        raise ChangefeedSourceError(
            f"table {table} is being landed by another landing, {holder} on "
            f"{options.connection.display}: a table has one writer at a time; stop that "
            "landing or wait for it to end, then run this one again"
        )
    return backend


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
