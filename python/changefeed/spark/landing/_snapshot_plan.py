"""Where a snapshot's rows come from (docs/protocol.md 12.2-12.3): the ULIDs of the
reserved block, chunk plans over the key, the source's SQL, and the read that each Spark
task runs with a connection of its own."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from changefeed.dialects import ChunkStatements, dialect_named
from changefeed.dialects.snapshot_types import Chunk, SnapshotRequest
from changefeed.spark.feedtable import with_operation_arrow
from changefeed.spark.landing._evolution import conform_arrow
from changefeed.spark.source import (
    BatchBuilder,
    ChangefeedSourceError,
    FeedOptions,
    to_hex,
)

#: A block (2^36 ULIDs, protocol section 3) holds 2^12 chunks of 2^24 rows (12.2).
CHUNK_BITS = 24
CHUNK_LIMIT = 1 << CHUNK_BITS
MAX_CHUNKS = 1 << (36 - CHUNK_BITS)

#: Default rows per chunk (one Spark task) and per landed batch (one Spark job, at least
#: one chunk per core). Each task and each job has a fixed cost of a few tenths of a second
#: (scheduling, the Python worker's round trips, a connection): with 250,000-row chunks it
#: was a third of a 10 M-row snapshot's time on 2 cores (docs/performance.md, Snapshot).
CHUNK_ROWS = 1_000_000
BATCH_ROWS = 4_000_000

_ARROW_ROWS = 65_536

#: Keys sampled per planned chunk. The sample is of whole blocks (``tablesample system``),
#: whose keys lie together: with about 100 keys per chunk a chunk's bounds came from one
#: or two blocks and chunks of one plan differed in size up to 3x, so a batch's Spark job
#: waited for its largest chunk with a core idle. 10,000 keys are about 100 blocks of a
#: narrow table per chunk: chunks within about 10% of each other.
SAMPLE_KEYS_PER_CHUNK = 10_000
#: The most keys a plan samples (they travel to the driver as text).
SAMPLE_KEYS_MAX = 1_000_000


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


def plan(
    conn: Any,
    reader: ChunkStatements,
    shard: int,
    first_index: int,
    lower: tuple[str, ...] | None,
    lower_inclusive: bool,
    upper: tuple[str, ...] | None,
    chunk_rows: int,
    multiple: int = 1,
) -> tuple[list[Chunk], int]:
    """The chunks of the range and its estimated row count: split keys from the whole
    range's keys when the table is small (an estimate under 20 chunks' sample), else from
    a block sample of about :data:`SAMPLE_KEYS_PER_CHUNK` keys per chunk (at most
    :data:`SAMPLE_KEYS_MAX` in all).
    A plan of at least ``multiple`` chunks (the session's cores) is rounded up to a
    multiple of it, so that no batch's job is left with fewer tasks than cores; a smaller
    plan is kept (a small table is not cut into a chunk per core, each a connection)."""
    whole = Chunk(-1, lower, lower_inclusive, upper, True)
    db = dialect_named(reader.info.dialect).snapshot()
    estimate = db.estimated_rows(conn, reader.info.info.source)
    if estimate < SAMPLE_KEYS_PER_CHUNK * 20:
        sql, params = reader.sample_sql(shard, whole, None)
        sample = [tuple(r) for r in db.fetch_all(conn, sql, params)]
        estimate = len(sample)
    else:
        keys = min(SAMPLE_KEYS_MAX, SAMPLE_KEYS_PER_CHUNK * math.ceil(estimate / chunk_rows))
        percent = min(100.0, 100.0 * keys / estimate)
        sql, params = reader.sample_sql(shard, whole, percent)
        sample = [tuple(r) for r in db.fetch_all(conn, sql, params)]
        if lower is not None or upper is not None or reader.shard_expression is not None:
            # The sample saw the range only: scale the estimate by its share of the table.
            estimate = int(len(sample) * 100 / percent)
    wanted = math.ceil(estimate / chunk_rows)
    if wanted >= multiple:
        wanted = multiple * math.ceil(wanted / multiple)
    chunks = max(1, min(MAX_CHUNKS - first_index, wanted))
    return plan_chunks(split_keys(sample, chunks), first_index, lower, lower_inclusive, upper), (
        estimate
    )


# -- Reading on the executors ---------------------------------------------------------


def chunk_reader(
    options: FeedOptions,
    reader: ChunkStatements,
    shard: int,
    first_ulid: bytes,
    operation: bool = False,
    payload: Any = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: each input row names a chunk (its index and JSON);
    each task opens its own connection (the landing's connection options travel with
    the function) and yields the chunk's rows as Arrow batches of the landed schema
    (with ``operation``, the operation column too: ``snapshot``; with ``payload``, the
    table's payload struct, the payload in its shape: :func:`._evolution.conform_arrow`)."""

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        from changefeed.spark.source import open_backend

        specs = [spec for batch in batches for spec in batch.column("spec").to_pylist()]
        if not specs:
            return
        backend = open_backend(options.connection, options.changefeed_schema)
        try:
            conn = backend.conn
            builder = BatchBuilder(reader.info.layout())
            db = dialect_named(reader.info.dialect).snapshot()
            direct = db.arrow_reader(conn, options.connection.uri, builder.layout)
            for spec in specs:
                chunk = _chunk_from_json(spec)
                sql, params = reader.chunk_sql(shard, chunk)
                if direct is not None:
                    pages = direct(sql, params)
                else:
                    pages = (
                        builder.snapshot_arrays(rows)
                        for rows in db.fetch_batches(conn, sql, params, _ARROW_ROWS)
                    )
                done = 0
                for arrays in pages:
                    count = len(arrays[0])
                    ulids = ulid_column(first_ulid, chunk.index, done, count)
                    events = builder.snapshot_batch(shard, ulids, arrays)
                    if payload is not None:
                        events = conform_arrow(events, payload)
                    yield with_operation_arrow(events, snapshot=True) if operation else events
                    done += count
        finally:
            backend.close()

    return read


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


def chunk_specs(spark: Any, chunks: Sequence[Chunk]) -> Any:
    """A frame of the chunks' specs (:func:`chunk_json`), each in a partition of its own:
    one task per chunk. A range of n rows in n partitions has one row in each, and each
    row picks its spec from a literal array; no ``SparkContext``, so Spark Connect too.
    (A ``repartition`` deals rows out round-robin from a random start, so some tasks got
    two chunks and others none.)"""
    from pyspark.sql import functions as F

    specs = F.array(*[F.lit(chunk_json(c)) for c in chunks])
    rows = spark.range(0, len(chunks), 1, len(chunks))
    return rows.select(F.element_at(specs, (F.col("id") + 1).cast("int")).alias("spec"))


def chunk_frame(
    spark: Any, chunks: Sequence[Chunk], read: Callable[[Iterator[Any]], Iterator[Any]], schema: Any
) -> Any:
    """A frame of the chunks' rows: one task per chunk."""
    return chunk_specs(spark, chunks).mapInArrow(read, schema)


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
