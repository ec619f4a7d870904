"""Snapshots (docs/protocol.md section 12): every existing key of the source, landed as
events with the ULIDs of one block the database reserved, while writers keep writing.

A request (``snapshot_begin:<feed>``, :func:`request_snapshot`) reserves one empty block
``[B, B + 2^36)`` in a shard. The landing that finds it pending (:func:`execute`):

1. waits until the shard's safe point reaches ``B - 1`` (no event below ``B`` can commit
   any more), then lands the shard's events up to ``B - 1``;
2. reads the source in primary-key chunks, each a Spark task with a connection of its own,
   and gives row ``r`` of chunk ``j`` the ULID ``B + j * 2^24 + r`` (:func:`snapshot_ulid`);
   groups of chunks are written as landed batches, in chunk order;
3. calls ``snapshot_finish``; live events (all above the block) land next as usual.

The landed table is the record of progress: after a kill, its head of the shard lies in
the block, its chunk number says which chunks committed and its key where to go on
(:func:`resume_point`); the rest is planned again from there.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from changefeed.client.core import quote_pg
from changefeed.spark.source import ChangefeedSourceError, FeedOptions, SourceFeed
from changefeed.spark.source._positions import to_hex

LOG = logging.getLogger("changefeed.snapshot")

#: A block (2^36 ULIDs, protocol section 3) holds 2^12 chunks of 2^24 rows (12.2).
CHUNK_BITS = 24
CHUNK_LIMIT = 1 << CHUNK_BITS
MAX_CHUNKS = 1 << (36 - CHUNK_BITS)

#: Default rows per chunk (one Spark task) and per landed batch (one Spark job).
CHUNK_ROWS = 250_000
BATCH_ROWS = 2_000_000

#: How long the barrier (step 1) waits for writes allocated below the block.
BARRIER_TIMEOUT = 120.0

_ARROW_ROWS = 65_536


@dataclass(frozen=True)
class SnapshotRequest:
    """One row of ``snapshot:<feed>``: ``key_from``/``key_to`` are inclusive bounds, one
    value per key column (None: unbounded)."""

    snapshot_id: int
    shard: int
    first_ulid: bytes
    last_ulid: bytes
    key_from: tuple[Any, ...] | None
    key_to: tuple[Any, ...] | None


@dataclass(frozen=True)
class Chunk:
    """A key range read by one task: ``lower`` (inclusive or not) to ``upper``."""

    index: int
    lower: tuple[str, ...] | None
    lower_inclusive: bool
    upper: tuple[str, ...] | None
    upper_inclusive: bool


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


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


# -- ULIDs (protocol 12.2) ---------------------------------------------------------


def _low(ulid: bytes) -> int:
    return int.from_bytes(ulid[8:], "big", signed=True)


def snapshot_ulid(first_ulid: bytes, chunk: int, row: int) -> bytes:
    """The ULID of row ``row`` of chunk ``chunk`` of the block starting at ``first_ulid``.

    >>> b = bytes(8) + (5 << 36).to_bytes(8, "big")
    >>> snapshot_ulid(b, 1, 2)[8:].hex()
    '0000005001000002'
    """
    if not 0 <= chunk < MAX_CHUNKS:
        raise ChangefeedSourceError(
            f"snapshot chunk {chunk} is outside [0, {MAX_CHUNKS}): plan fewer chunks "
            "(a larger chunk size) or snapshot a key range at a time"
        )
    if not 0 <= row < CHUNK_LIMIT:
        raise ChangefeedSourceError(
            f"snapshot chunk {chunk} has more than 2^{CHUNK_BITS} rows: plan smaller chunks"
        )
    low = _low(first_ulid) + (chunk << CHUNK_BITS) + row
    return first_ulid[:8] + low.to_bytes(8, "big", signed=True)


def chunk_of(first_ulid: bytes, ulid: bytes) -> int:
    """The chunk number of a snapshot row's ULID (its block starts at ``first_ulid``)."""
    return (_low(ulid) - _low(first_ulid)) >> CHUNK_BITS


def ulid_before(ulid: bytes) -> bytes:
    """The ULID just below ``ulid`` (an unsigned decrement of its 16 bytes)."""
    value = int.from_bytes(ulid, "big")
    if value == 0:
        raise ValueError("no ULID lies below 16 zero bytes")
    return (value - 1).to_bytes(16, "big")


def ulid_column(first_ulid: bytes, chunk: int, start_row: int, count: int) -> Any:
    """An Arrow ``binary`` array of the ULIDs of rows ``start_row ..`` of ``chunk``: built
    from one numpy buffer, not a bytes object per row (the snapshot's hot loop)."""
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    if start_row + count > CHUNK_LIMIT:
        snapshot_ulid(first_ulid, chunk, start_row + count)  # raises, naming the limit
    base = _low(snapshot_ulid(first_ulid, chunk, start_row))
    data = np.empty((count, 16), dtype=np.uint8)
    data[:, :8] = np.frombuffer(first_ulid[:8], dtype=np.uint8)
    lows = (np.arange(count, dtype=np.int64) + base).astype(">i8")
    data[:, 8:] = lows.view(np.uint8).reshape(count, 8)
    offsets = np.arange(0, 16 * (count + 1), 16, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())]
    )


# -- Planning -----------------------------------------------------------------------


def plan_chunks(
    boundaries: Sequence[tuple[str, ...]],
    first_index: int,
    lower: tuple[str, ...] | None,
    lower_inclusive: bool,
    upper: tuple[str, ...] | None,
) -> list[Chunk]:
    """Chunks from sorted, distinct split keys: chunk ``i`` covers ``[boundaries[i-1],
    boundaries[i])``, the first from ``lower`` and the last up to ``upper`` (inclusive).

    >>> [(c.index, c.lower, c.upper) for c in plan_chunks([("5",)], 3, None, True, ("9",))]
    [(3, None, ('5',)), (4, ('5',), ('9',))]
    """
    if first_index + len(boundaries) >= MAX_CHUNKS:
        raise ChangefeedSourceError(
            f"a snapshot plan of {len(boundaries) + 1} chunks from chunk {first_index} does "
            f"not fit the block's {MAX_CHUNKS} chunks: use a larger chunk size"
        )
    edges: list[tuple[str, ...] | None] = [lower, *boundaries]
    chunks = []
    for i, start in enumerate(edges):
        last = i == len(edges) - 1
        chunks.append(
            Chunk(
                index=first_index + i,
                lower=start,
                lower_inclusive=lower_inclusive if i == 0 else True,
                upper=upper if last else edges[i + 1],
                upper_inclusive=last,
            )
        )
    return chunks


def split_keys(sample: Sequence[tuple[str, ...]], chunks: int) -> list[tuple[str, ...]]:
    """``chunks - 1`` split keys at the quantiles of a sorted key sample, duplicates
    dropped (a chunk then covers more of the sample).

    >>> split_keys([(str(i),) for i in range(10)], 3)
    [('3',), ('6',)]
    """
    if chunks <= 1 or not sample:
        return []
    picked: list[tuple[str, ...]] = []
    for i in range(1, chunks):
        key = sample[min(len(sample) - 1, (i * len(sample)) // chunks)]
        if not picked or key != picked[-1]:
            picked.append(key)
    return picked


def chunk_terms(
    shard_expression: str | None,
    shard: int,
    chunk: Chunk,
    compare: Callable[[str, Sequence[Any]], tuple[str, list[Any]]],
) -> tuple[list[str], list[Any]]:
    """The terms of a chunk's predicate and their parameters: the shard expression's
    shard (capture: trigger feeds), then each key bound as ``compare(op, bound)`` writes
    it (the key compared with the bound by ``op``)."""
    terms: list[str] = []
    params: list[Any] = []
    if shard_expression is not None:
        terms.append(f"({shard_expression}) = %s")
        params.append(shard)
    bounds = (
        (chunk.lower, ">=" if chunk.lower_inclusive else ">"),
        (chunk.upper, "<=" if chunk.upper_inclusive else "<"),
    )
    for bound, op in bounds:
        if bound is not None:
            sql, values = compare(op, bound)
            terms.append(sql)
            params += values
    return terms, params


class SourceReader:
    """SQL for a request's chunks, on the feed's source table (PostgreSQL)."""

    def __init__(self, info: SourceFeed, shard_expression: str | None) -> None:
        if info.payload is None:
            raise ChangefeedSourceError(
                f"a snapshot lands source rows: land feed {info.feed_id} with payload=true "
                "(changefeed land --payload)"
            )
        self.info = info
        self.shard_expression = shard_expression
        self.keys = [quote_pg(k.name) for k in info.keys]
        self.types = [k.db_type for k in info.keys]
        self.columns = [quote_pg(c.name) for c in info.payload]

    def _row(self, values: Sequence[Any]) -> tuple[str, list[Any]]:
        casts = ", ".join(f"%s::{t}" for t in self.types)
        return f"row({casts})", [None if v is None else str(v) for v in values]

    def where(self, shard: int, chunk_or_range: Chunk) -> tuple[str, list[Any]]:
        """The predicate of a chunk (or of a whole request, as a chunk with index -1)."""
        key = f"row({', '.join(self.keys)})"

        def compare(op: str, bound: Sequence[Any]) -> tuple[str, list[Any]]:
            sql, values = self._row(bound)
            return f"{key} {op} {sql}", values

        terms, params = chunk_terms(self.shard_expression, shard, chunk_or_range, compare)
        return (" and ".join(terms) or "true"), params

    def _order(self) -> str:
        # Qualified: a bare name in ORDER BY means an output column first, and the
        # sample's outputs are the keys as text, which would sort as text.
        return ", ".join(f"s.{k}" for k in self.keys)

    def chunk_sql(self, shard: int, chunk: Chunk) -> tuple[str, list[Any]]:
        where, params = self.where(shard, chunk)
        select = ", ".join([*(f"s.{k}" for k in self.keys), *(f"s.{c}" for c in self.columns)])
        return (
            f"select {select} from {self.info.info.source} as s where {where} "
            f"order by {self._order()}",
            params,
        )

    def sample_sql(self, shard: int, whole: Chunk, percent: float | None) -> tuple[str, list[Any]]:
        where, params = self.where(shard, whole)
        keys_text = ", ".join(f"s.{k}::text" for k in self.keys)
        sample = f" tablesample system ({percent:.6f})" if percent is not None else ""
        return (
            f"select {keys_text} from {self.info.info.source} as s{sample} where {where} "
            f"order by {self._order()}",
            params,
        )


def plan(
    conn: Any,
    reader: SourceReader,
    shard: int,
    first_index: int,
    lower: tuple[str, ...] | None,
    lower_inclusive: bool,
    upper: tuple[str, ...] | None,
    chunk_rows: int,
) -> tuple[list[Chunk], int]:
    """The chunks of the range and its estimated row count: split keys from the whole
    range's keys when it is small, else from a block sample of about 100 keys per chunk."""
    whole = Chunk(-1, lower, lower_inclusive, upper, True)
    db = statements(reader.info.dialect)
    estimate = db.estimated_rows(conn, reader.info.info.source)
    if estimate < 20 * chunk_rows:
        sql, params = reader.sample_sql(shard, whole, None)
        sample = [tuple(r) for r in db.fetch_all(conn, sql, params)]
        estimate = len(sample)
    else:
        percent = min(100.0, 100.0 * 100 * (estimate / chunk_rows) / estimate)
        sql, params = reader.sample_sql(shard, whole, percent)
        sample = [tuple(r) for r in db.fetch_all(conn, sql, params)]
        if lower is not None or upper is not None or reader.shard_expression is not None:
            # The sample saw the range only: scale the estimate by its share of the table.
            estimate = int(len(sample) * 100 / percent)
    chunks = max(1, min(MAX_CHUNKS - first_index, math.ceil(estimate / chunk_rows)))
    return plan_chunks(split_keys(sample, chunks), first_index, lower, lower_inclusive, upper), (
        estimate
    )


def _estimated_rows(conn: Any, source: str) -> int:
    row = conn.execute(
        "select c.reltuples::bigint from pg_catalog.pg_class as c "
        "where c.oid = pg_catalog.to_regclass(%s)",
        (source,),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else -1


# -- Requests -----------------------------------------------------------------------


def _decode_bound(raw: Any, names: Sequence[str], what: str) -> tuple[Any, ...] | None:
    if raw is None:
        return None
    values = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(values, list) or len(values) != len(names):
        raise ChangefeedSourceError(
            f"{what} must be a JSON array of {len(names)} value(s) (the key "
            f"{', '.join(names)}), got {raw!r}"
        )
    return tuple(values)


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


def _snapshot_table(info: SourceFeed) -> str:
    if "snapshot_begin" not in info.names:
        raise ChangefeedSourceError(
            f"feed {info.feed_id} was set up by a package without snapshots: run "
            "`dbt run-operation changefeed.upgrade_feed` (or setup_feed) for it first; it "
            "adds the snapshot table and routines and keeps the data"
        )
    return info.info.q("snapshot")


def request_snapshot(
    conn: Any, info: SourceFeed, shard: int, key_from: str | None, key_to: str | None
) -> SnapshotRequest:
    """Reserve the block of a new request (``snapshot_begin``); the next landing runs it."""
    _snapshot_table(info)
    row = conn.execute(
        f"select s.snapshot_id from {info.info.q('snapshot_begin')}(%s, %s, %s) as s",
        (shard, key_from, key_to),
    ).fetchone()
    found = [r for r in pending_requests(conn, info) if r.snapshot_id == int(row[0])]
    return found[0]


def pending_requests(conn: Any, info: SourceFeed) -> list[SnapshotRequest]:
    """The feed's unfinished requests, oldest first ([] for a feed without snapshots)."""
    if "snapshot" not in info.names:
        return []
    names = [k.name for k in info.keys]
    rows = conn.execute(
        f"select snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to "
        f"from {info.info.q('snapshot')} where finished_at is null order by snapshot_id"
    ).fetchall()
    return [
        SnapshotRequest(
            int(r[0]),
            int(r[1]),
            bytes(r[2]),
            bytes(r[3]),
            _decode_bound(r[4], names, "key_from"),
            _decode_bound(r[5], names, "key_to"),
        )
        for r in rows
    ]


def finish(conn: Any, info: SourceFeed, request: SnapshotRequest, rows: int) -> None:
    conn.execute(
        f"select {info.info.q('snapshot_finish')}(%s, %s)", (request.snapshot_id, rows)
    ).fetchone()


def shard_expression(conn: Any, info: SourceFeed) -> str | None:
    """The feed's ``shard`` expression with ``capture: trigger``, else None."""
    row = conn.execute(
        f"select options from {quote_pg(info.changefeed_schema)}.feeds where feed_id = %s",
        (info.feed_id,),
    ).fetchone()
    options = dict(row[0]) if row and row[0] else {}
    if options.get("capture") == "trigger" and options.get("shard"):
        return str(options["shard"])
    return None


def wait_for_barrier(
    backend: Any, info: SourceFeed, request: SnapshotRequest, timeout: float = BARRIER_TIMEOUT
) -> None:
    """Step 1: until the shard's safe point reaches the block (no event below it can
    commit any more, S1). A write allocated below the block and never finished keeps it
    closed until it is reaped, burned or tombstoned."""
    target = ulid_before(request.first_ulid)
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


# -- Reading on the executors ---------------------------------------------------------


def chunk_reader(
    options: FeedOptions, reader: SourceReader, shard: int, first_ulid: bytes
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: each input row names a chunk (its index and JSON);
    each task opens its own connection (the landing's connection options travel with
    the function) and yields the chunk's rows as Arrow batches of the landed schema."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        from changefeed.spark.source._backend import open_backend

        specs = [spec for batch in batches for spec in batch.column("spec").to_pylist()]
        if not specs:
            return
        backend = open_backend(options.connection, options.changefeed_schema)
        try:
            conn = backend.conn  # type: ignore[attr-defined]
            builder = _builder(reader.info)
            db = statements(reader.info.dialect)
            for spec in specs:
                chunk = _chunk_from_json(spec)
                sql, params = reader.chunk_sql(shard, chunk)
                done = 0
                for rows in db.fetch_batches(conn, sql, params, _ARROW_ROWS):
                    ulids = ulid_column(first_ulid, chunk.index, done, len(rows))
                    yield builder.build_columns(shard, ulids, rows)
                    done += len(rows)
        finally:
            backend.close()

    return read


def _builder(info: SourceFeed) -> Any:
    from changefeed.spark.source._types import BatchBuilder

    return BatchBuilder(info.layout())


def chunk_json(chunk: Chunk) -> str:
    return json.dumps([chunk.index, chunk.lower, chunk.lower_inclusive, chunk.upper,
                       chunk.upper_inclusive])  # fmt: skip


def _chunk_from_json(text: str) -> Chunk:
    index, lower, lower_inclusive, upper, upper_inclusive = json.loads(text)
    return Chunk(
        int(index),
        tuple(lower) if lower is not None else None,
        bool(lower_inclusive),
        tuple(upper) if upper is not None else None,
        bool(upper_inclusive),
    )


def chunk_frame(
    spark: Any, chunks: Sequence[Chunk], read: Callable[[Iterator[Any]], Iterator[Any]], schema: Any
) -> Any:
    """A frame of the chunks' rows: one task per chunk."""
    specs = spark.createDataFrame([(chunk_json(c),) for c in chunks], "spec string")
    return specs.repartition(len(chunks)).mapInArrow(read, schema)


def group(chunks: Sequence[Chunk], per_batch: int) -> list[list[Chunk]]:
    """Consecutive chunks, ``per_batch`` at a time (each group one landed batch)."""
    return [list(chunks[i : i + per_batch]) for i in range(0, len(chunks), per_batch)]


def resume_point(
    request: SnapshotRequest, head: bytes | None, head_key: Sequence[Any] | None
) -> tuple[int, tuple[str, ...] | None, bool] | None:
    """Where the request's chunks start for a table whose head of the shard is ``head``:
    ``(first chunk, lower key, inclusive)``, or None when the table is past the block
    (the request is not for this table)."""
    lower = tuple(str(v) for v in request.key_from) if request.key_from is not None else None
    if head is None or head < request.first_ulid:
        return 0, lower, True
    if head > request.last_ulid:
        return None
    if head_key is None:
        raise ChangefeedSourceError(
            f"snapshot {request.snapshot_id}: no landed row has the head {to_hex(head)}"
        )
    return chunk_of(request.first_ulid, head) + 1, tuple(str(v) for v in head_key), False


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
    from changefeed.spark.landing import _format

    started = time.monotonic()
    shard = request.shard
    wait_for_barrier(backend, info, request)
    landing._run(None, on_stage, only=[shard], caps={shard: ulid_before(request.first_ulid)})
    spark, table = landing.spark, landing.table
    fmt = _format.choose_format(spark, table, landing.table_format, exists=True)
    heads, last_batch = _format.committed_heads(spark, table, [shard], fmt)
    head = heads.get(shard)
    in_block = head is not None and request.first_ulid <= head <= request.last_ulid
    head_key = _head_key(spark, table, info, shard, head) if in_block else None
    point = resume_point(request, head, head_key)
    if point is None:
        LOG.warning(
            "snapshot %s of feed %s shard %s: table %s already holds events above its block; "
            "not executed here (request a new snapshot for this table)",
            request.snapshot_id, info.feed_id, shard, table.text,
        )  # fmt: skip
        return 0
    first, lower, inclusive = point
    upper = tuple(str(v) for v in request.key_to) if request.key_to is not None else None
    db = statements(info.dialect)
    reader = db.reader(info, db.shard_expression(backend.conn, info))
    chunk_rows = landing.snapshot_chunk_rows
    chunks, estimate = plan(backend.conn, reader, shard, first, lower, inclusive, upper, chunk_rows)
    read = chunk_reader(landing.options, reader, shard, request.first_ulid)
    schema = info.layout().spark_schema()
    per_batch = max(1, landing.snapshot_batch_rows // chunk_rows)
    rows, batch, done = 0, last_batch, 0
    for chunk_group in group(chunks, per_batch):
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
        _snapshot_table(info)
        names = [k.name for k in info.keys]
        bounds = key_bound(key_from, names, "key_from"), key_bound(key_to, names, "key_to")
        conn = backend.conn  # type: ignore[attr-defined]
        db = statements(info.dialect)
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


# -- The database's side, per dialect -------------------------------------------------


class SnapshotStatements(Protocol):
    """What a snapshot asks of the source database; :func:`statements` picks the
    dialect's (PostgreSQL: this module's functions; SQL Server: ``_snapshot_sqlserver``)."""

    def reader(self, info: SourceFeed, shard_expression: str | None) -> Any:
        """The chunk and sample statements (``chunk_sql``, ``sample_sql``) of the feed."""
        ...

    def pending_requests(self, conn: Any, info: SourceFeed) -> list[SnapshotRequest]: ...

    def request(
        self, conn: Any, info: SourceFeed, shard: int, key_from: str | None, key_to: str | None
    ) -> SnapshotRequest: ...

    def finish(self, conn: Any, info: SourceFeed, request: SnapshotRequest, rows: int) -> None: ...

    def shard_expression(self, conn: Any, info: SourceFeed) -> str | None: ...

    def estimated_rows(self, conn: Any, source: str) -> int: ...

    def fetch_all(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    def fetch_batches(
        self, conn: Any, sql: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]: ...


class PostgresStatements:
    """PostgreSQL's side (psycopg): the functions of this module."""

    def reader(self, info: SourceFeed, shard_expression: str | None) -> SourceReader:
        return SourceReader(info, shard_expression)

    def pending_requests(self, conn: Any, info: SourceFeed) -> list[SnapshotRequest]:
        return pending_requests(conn, info)

    def request(
        self, conn: Any, info: SourceFeed, shard: int, key_from: str | None, key_to: str | None
    ) -> SnapshotRequest:
        return request_snapshot(conn, info, shard, key_from, key_to)

    def finish(self, conn: Any, info: SourceFeed, request: SnapshotRequest, rows: int) -> None:
        finish(conn, info, request, rows)

    def shard_expression(self, conn: Any, info: SourceFeed) -> str | None:
        return shard_expression(conn, info)

    def estimated_rows(self, conn: Any, source: str) -> int:
        return _estimated_rows(conn, source)

    def fetch_all(self, conn: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def fetch_batches(
        self, conn: Any, sql: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            while rows := cur.fetchmany(size):
                yield rows


def statements(dialect: str) -> SnapshotStatements:
    """The snapshot statements of a source database (``SourceFeed.dialect``)."""
    if dialect == "sqlserver":
        from changefeed.spark.landing._snapshot_sqlserver import SqlServerStatements

        return SqlServerStatements()
    return PostgresStatements()
