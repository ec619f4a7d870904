"""``format("changefeed")``: the batch and streaming readers (Python Data Source API).

Planning runs on the driver; every partition reads one shard's range ``(start, end]``
through ``read_feed``, where ``end`` is a safe point observed while planning. See
docs/spark-source.md for the options and the exactly-once argument.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _AvailableNow: Any = SupportsTriggerAvailableNow
except ImportError:
    # Spark 4.1 has no such mixin for Python sources: its engine wraps the source and
    # freezes the target itself with one ``latestOffset()`` call (docs/spark-source.md).
    _AvailableNow = object

from changefeed.dialects import Backend, Connection, SourceFeed
from changefeed.dialects.rows import BatchBuilder
from changefeed.errors import ChangefeedSourceError
from changefeed.spark.source._dialects import open_backend
from changefeed.spark.source._limits import bounded_ends, events_up_to
from changefeed.spark.source._options import FeedOptions, parse_options
from changefeed.spark.source._positions import decode_offset, encode_offset
from changefeed.spark.source._read_range import read_range
from changefeed.spark.source._retention import SOURCE_FIX, check_not_behind

FORMAT_NAME = "changefeed"
_STREAM = "this streaming query of format('changefeed')"


@dataclass
class FeedPartition(InputPartition):
    """One shard's range ``start < ulid <= end`` (everything ``read`` needs, picklable)."""

    connection: Connection
    info: SourceFeed
    shard: int
    start: bytes
    end: bytes
    page_size: int

    def __repr__(self) -> str:
        return (
            f"FeedPartition(feed={self.info.feed_id!r}, shard={self.shard}, "
            f"start={self.start.hex()}, end={self.end.hex()})"
        )


def describe(options: FeedOptions) -> SourceFeed:
    with open_backend(options.connection, options.changefeed_schema) as backend:
        return backend.describe(options.feed, options.payload)


def read_partition(partition: Any) -> Iterator[Any]:
    """Arrow record batches of one partition, one per ``read_feed`` page."""
    if not isinstance(partition, FeedPartition):  # Spark's placeholder for "no partitions"
        return
    builder = BatchBuilder(partition.info.layout())
    with open_backend(partition.connection, partition.info.changefeed_schema) as backend:
        for page in read_range(
            backend, partition.info, partition.shard, partition.start, partition.end,
            partition.page_size,
        ):  # fmt: skip
            yield builder.build(page)


def _starts(options: FeedOptions, shards: Sequence[int], now: dict[int, bytes]) -> dict[int, bytes]:
    starts: dict[int, bytes] = {}
    for shard in shards:
        if options.starting_offsets is not None and shard in options.starting_offsets:
            starts[shard] = options.starting_offsets[shard]
        elif options.starting_position.kind == "now":
            starts[shard] = now[shard]
        else:
            starts[shard] = options.starting_position.fixed_cursor()
    return starts


def _publish_and_snapshot(
    backend: Backend, options: FeedOptions, info: SourceFeed, shards: Sequence[int]
) -> dict[int, bytes]:
    """Move the outbox (outbox feeds, unless moveOutbox=false), then read safe points."""
    if options.move_outbox:
        backend.move_outbox(info, shards)
    return backend.safe_points(info, shards)


def plan_cursors(
    options: FeedOptions, info: SourceFeed
) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """Start and end cursor per shard, fixed now (driver side).

    Shards: the ``shards`` option, else every shard of the feed's state table (with
    ``endingOffsets``: the shards it names). End: ``endingOffsets`` if given, else each
    shard's safe point after moving the outbox. Start: ``startingOffsets`` for the shards
    it names, else ``startingPosition`` (``now`` = the same safe points: an empty range).
    """
    with open_backend(options.connection, options.changefeed_schema) as backend:
        if options.ending_offsets is not None:
            ends = dict(options.ending_offsets)
            shards = sorted(ends if options.shards is None else set(ends) & set(options.shards))
            now = _publish_and_snapshot(backend, options, info, shards)
            beyond = [shard for shard in shards if ends[shard] > now[shard]]
            if beyond:
                raise ChangefeedSourceError(
                    f"endingOffsets of feed {info.feed_id} is above the safe point on shard(s) "
                    f"{', '.join(map(str, beyond))}: events there are not final yet (safe "
                    f"point of shard {beyond[0]}: {now[beyond[0]].hex()})"
                )
        else:
            shards = list(options.shards) if options.shards is not None else backend.shards(info)
            ends = _publish_and_snapshot(backend, options, info, shards)
            now = ends
        starts = _starts(options, shards, now)
        check_not_behind(backend, info, starts, "this read of format('changefeed')", SOURCE_FIX)
    return starts, {shard: ends[shard] for shard in shards}


def partitions_for(
    options: FeedOptions, info: SourceFeed, starts: dict[int, bytes], ends: dict[int, bytes]
) -> list[FeedPartition]:
    parts = []
    for shard in sorted(ends):
        start = starts.get(shard, options.starting_position.fixed_cursor())
        if ends[shard] > start:
            parts.append(
                FeedPartition(
                    options.connection, info, shard, start, ends[shard], options.page_size
                )
            )
    return parts


class FeedDataSource(DataSource):
    """``spark.read.format("changefeed")`` and ``spark.readStream.format("changefeed")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.feed_options = parse_options(options)

    def schema(self) -> Any:
        return describe(self.feed_options).layout().spark_schema()

    def reader(self, schema: Any) -> FeedBatchReader:
        options = self.feed_options
        if options.max_events_per_trigger is not None or options.min_events_per_trigger:
            raise ChangefeedSourceError(
                "options maxEventsPerTrigger and minEventsPerTrigger shape the micro-batches "
                "of spark.readStream; a batch read reads up to endingOffsets (or the safe "
                "points): remove them"
            )
        return FeedBatchReader(self.feed_options, _checked(self.feed_options, schema))

    def streamReader(self, schema: Any) -> FeedStreamReader:
        return FeedStreamReader(self.feed_options, _checked(self.feed_options, schema))


def _checked(options: FeedOptions, schema: Any) -> SourceFeed:
    info = describe(options)
    expected = info.layout().spark_schema()
    if schema is not None and schema.simpleString() != expected.simpleString():
        raise ChangefeedSourceError(
            f"the schema given to format('changefeed') ({schema.simpleString()}) differs from "
            f"feed {info.feed_id}'s ({expected.simpleString()}); do not pass .schema(...)"
        )
    return info


class FeedBatchReader(DataSourceReader):
    """A batch read: safe points are fixed once, when Spark plans the query."""

    def __init__(self, options: FeedOptions, info: SourceFeed) -> None:
        self.options = options
        self.info = info

    def partitions(self) -> Sequence[InputPartition]:
        starts, ends = plan_cursors(self.options, self.info)
        return partitions_for(self.options, self.info, starts, ends)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)


class FeedStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """A micro-batch source whose offsets are per-shard cursors (docs/spark-source.md)."""

    def __init__(self, options: FeedOptions, info: SourceFeed) -> None:
        self.options = options
        self.info = info
        self._target: dict[int, bytes] | None = None
        self._last: dict[str, Any] | None = None
        self._advanced = time.monotonic()  # when latestOffset last moved (maxTriggerDelay)

    def initialOffset(self) -> dict[str, Any]:
        with self._backend() as backend:
            shards = self._shards(backend)
            now = (
                _publish_and_snapshot(backend, self.options, self.info, shards)
                if self.options.starting_position.kind == "now"
                else {}
            )
        offset = encode_offset(_starts(self.options, shards, now), initial=True)
        self._last = offset
        return offset

    def _shards(self, backend: Backend) -> list[int]:
        if self.options.shards is not None:
            return list(self.options.shards)
        return backend.shards(self.info)

    def _current(self) -> dict[int, bytes]:
        with self._backend() as backend:
            return _publish_and_snapshot(backend, self.options, self.info, self._shards(backend))

    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2+ only; 4.1 never calls it and freezes ``latestOffset()`` instead."""
        self._target = self._current()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        # Only a start Spark gave or confirmed may be bounded: Spark 4.1 calls this without
        # arguments, and under availableNow before it tells the source (partitions(latest,
        # latest)) where a restarted checkpoint stands; a bounded end counted from the
        # initial offset could then lie below the checkpoint and read events again.
        known = start is not None or self._last is not None
        if start is None:
            start = self._last if self._last is not None else self.initialOffset()
        begin = decode_offset(start)
        default = self.options.starting_position.fixed_cursor()
        with self._backend() as backend:
            if self._target is not None:
                latest = self._target
            else:
                latest = _publish_and_snapshot(
                    backend, self.options, self.info, self._shards(backend)
                )
            starts = {shard: begin.get(shard, default) for shard in latest}
            tops = {shard: max(point, starts[shard]) for shard, point in latest.items()}
            if known and self._waits(backend, starts, tops):
                return start
            if self.options.max_events_per_trigger is not None and known:
                limit_events = self.options.max_events_per_trigger
                tops = bounded_ends(backend, self.info, starts, tops, limit_events)
        offset = encode_offset({**begin, **tops})
        if offset != start:
            self._advanced = time.monotonic()
        self._last = offset
        return offset

    def _waits(self, backend: Backend, starts: dict[int, bytes], tops: dict[int, bytes]) -> bool:
        """minEventsPerTrigger: whether to skip this trigger, having fewer new events and
        less than maxTriggerDelay since the last micro-batch (never under availableNow,
        whose target is fixed and must be reached)."""
        least = self.options.min_events_per_trigger
        if least is None or self._target is not None:
            return False
        if time.monotonic() - self._advanced >= self.options.max_trigger_delay:
            return False
        return events_up_to(backend, self.info, starts, tops, least) < least

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        starts = decode_offset(start)
        if "retention" in self.info.names:
            with self._backend() as backend:
                check_not_behind(backend, self.info, starts, _STREAM, SOURCE_FIX)
        # The next micro-batch starts where this one ends; on a restart Spark calls this
        # with the newest logged offset at both ends before anything else (Spark 4.1).
        self._last = end
        return partitions_for(self.options, self.info, starts, decode_offset(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """The cursor of record lives in Spark's checkpoint (its offsets and commit logs);
        with the option ``consumer``, the committed cursors are also registered in the
        database, so that retention keeps every event after them (protocol 8.1).

        Spark calls this for a batch when it plans the next one (or restarts), so the
        registered cursor lags one micro-batch behind: retention keeps more, never less.
        """
        if self.options.consumer is None:
            return
        cursors = decode_offset(end)
        with self._backend() as backend:
            # Checked first for the same message as a read's: save_cursor refuses such a
            # cursor too (CF013), but in the database's words.
            check_not_behind(backend, self.info, cursors, _STREAM, SOURCE_FIX)
            backend.save_cursors(self.info, self.options.consumer, cursors)

    def _backend(self) -> Backend:
        return open_backend(self.options.connection, self.options.changefeed_schema)
