"""Batches written as parquet files by changefeed itself (pyarrow), for a parquet landed
table whose location is on the local filesystem of a local Spark: a snapshot's, by the
Spark tasks that read its chunks, and a warm landing run's live events, by the driver
that read them.

Why: both already hold their rows as Arrow batches in the landed table's schema. Handing
them to Spark's writer converts every value into a Spark row and encodes it again; on 2
cores that writer alone runs at about half the speed of a plain ``COPY`` (docs/
performance.md, "Snapshot"), and for a small live batch its job is most of the run's
time. Written by pyarrow, the same batches go to parquet without the row conversion, and
a live batch without a Spark job.

The commit is the parquet format's own (protocol 11.2), unchanged:

1. every task (or the driver) writes one file under a staging directory in the table's
   location, named with a leading ``.`` so that Spark's file listing never reads it,
   first under a temporary name and renamed when complete, and reports the file's name
   and rows;
2. the driver deletes from the staging directory every file no task reported (a failed
   attempt's), deletes the directory ``changefeed_batch=<N>`` if a killed earlier attempt
   left it (never registered: N is above every registered batch), and renames the
   staging directory to it;
3. it registers the partition: the commit point. A kill before it leaves an unregistered
   directory, which no reader lists and the next attempt replaces.

Elsewhere (Delta, Iceberg, a table on another filesystem, a Spark cluster) batches are
written through Spark (:func:`changefeed.spark.landing._format.write_batch`).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from changefeed.dialects.snapshot_types import Chunk
from changefeed.spark import is_connect
from changefeed.spark.feedtable import BATCH_COLUMN, FeedTable, TableName
from changefeed.spark.landing._snapshot_plan import chunk_specs

#: The staging directories' prefix (hidden from Spark's listing by its leading dot; the
#: name predates live batches, and killed attempts' directories of either are cleared).
STAGING_PREFIX = ".changefeed-snapshot-"
#: The ways a landing writes its batches (``Landing(snapshot_writer=...)``).
WRITERS = ("auto", "spark")

_REPORT = "file string, rows bigint"


def local_location(spark: Any, table: TableName, fmt: str) -> Path | None:
    """The table's directory when its batches can be written as files here: a parquet
    table, a local Spark master (not Spark Connect, whose server's files are not this
    process's), a ``file:`` location; else None."""
    if fmt != "parquet" or is_connect(spark):
        return None
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    location = FeedTable(spark, table).location()
    parts = urllib.parse.urlsplit(location or "")
    if parts.scheme != "file":
        return None
    path = Path(urllib.parse.unquote(parts.path))
    return path if path.is_dir() else None


def files_location(spark: Any, table: TableName, fmt: str, writer: str) -> Path | None:
    """Where a landing with ``snapshot_writer=writer`` writes the table's batches as
    files itself (``"auto"`` and :func:`local_location`), its killed attempts' staging
    directories cleared first; ``None``: Spark's writer writes them."""
    location = local_location(spark, table, fmt) if writer == "auto" else None
    if location is not None:
        clear_staging(location)
    return location


def clear_staging(location: Path) -> None:
    """Delete the staging directories of killed attempts (the landing is the table's
    only writer, so none is in use)."""
    for path in location.glob(STAGING_PREFIX + "*"):
        shutil.rmtree(path, ignore_errors=True)


def file_writer(
    read: Callable[[Iterator[Any]], Iterator[Any]], staging: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of a task: ``read``'s batches (the chunk's rows in the
    landed schema) into one parquet file in ``staging``; yields its name and rows."""

    def write(specs: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

        name = f"part-{uuid.uuid4().hex}.parquet"
        partial = os.path.join(staging, "." + name + ".tmp")
        writer, rows = None, 0
        try:
            for batch in read(specs):
                if writer is None:
                    writer = pq.ParquetWriter(partial, batch.schema, compression="snappy")
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is not None:
            os.rename(partial, os.path.join(staging, name))
        yield pa.RecordBatch.from_pydict(
            {"file": [name if writer is not None else None], "rows": [rows]},
            schema=pa.schema([("file", pa.string()), ("rows", pa.int64())]),
        )

    return write


def write_driver_batch(spark: Any, rows: Any, table: TableName, batch: int, location: Path) -> None:
    """Commit the Arrow table ``rows`` (the landed schema, not empty) as batch ``batch``:
    steps 1-3 of the module doc with the driver as the one task, so no Spark job runs."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    staging = location / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        name = f"part-{uuid.uuid4().hex}.parquet"
        partial = staging / f".{name}.tmp"
        pq.write_table(rows, partial, compression="snappy")
        partial.rename(staging / name)
        _commit(spark, staging, table, batch, location)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _commit(spark: Any, staging: Path, table: TableName, batch: int, location: Path) -> None:
    """Steps 2 and 3: the staging directory becomes ``changefeed_batch=<batch>`` (replacing
    a killed attempt's, never registered), and the partition's registration commits it."""
    target = location / f"{BATCH_COLUMN}={int(batch)}"
    if target.exists():
        shutil.rmtree(target)
    os.rename(staging, target)
    spark.sql(f"alter table {table.sql} add partition ({BATCH_COLUMN}={int(batch)})")


def write_batch(
    spark: Any,
    chunks: Sequence[Chunk],
    read: Callable[[Iterator[Any]], Iterator[Any]],
    table: TableName,
    batch: int,
    location: Path,
) -> int:
    """Commit the rows of ``chunks`` as batch ``batch`` (steps 1-3 of the module doc);
    returns the rows written (0: nothing committed)."""
    staging = location / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        writer = file_writer(read, str(staging))
        reports = chunk_specs(spark, chunks).mapInArrow(writer, _REPORT).collect()
        files = {r["file"] for r in reports if r["file"] is not None}
        rows = sum(int(r["rows"]) for r in reports)
        for path in staging.iterdir():
            if path.name not in files:
                path.unlink()
        if not files:
            return 0
        _commit(spark, staging, table, batch, location)
        return rows
    finally:
        shutil.rmtree(staging, ignore_errors=True)
