"""The commit rule of a Spark feed (docs/protocol.md 11.2, 11.3 and 11.5) in PySpark."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from changefeed.errors import ChangefeedError
from changefeed.spark.feedtable._operation import OPERATION_COLUMN
from changefeed.spark.feedtable._table import (
    BATCH_COLUMN,
    SHARD_COLUMN,
    ULID_COLUMN,
    FeedTable,
)

RESERVED_COLUMNS: Final = (SHARD_COLUMN, ULID_COLUMN, OPERATION_COLUMN, BATCH_COLUMN)


class FeedOrderError(ChangefeedError, ValueError):
    """A batch would put an event at or below its shard's head (invariant F3)."""


def table_format(spark: Any, table: str) -> str:
    """The format of an existing feed table: ``parquet``, ``delta`` or ``iceberg``
    (:meth:`FeedTable.format`)."""
    return FeedTable.for_name(spark, table).format()


def feed_heads(spark: Any, table: str, shards: Iterable[int] | None = None) -> dict[int, bytes]:
    """Each shard's head (= safe point): max(ulid) over the committed rows.

    With ``shards``, only those shards' heads are looked for, newest batches first, and
    the reading stops once every one is found: a shard's head is in the newest batch that
    has the shard (F3), so a feed whose shards all wrote recently costs its newest batch,
    whatever its size. A shard without rows makes it read every batch. Heads of other
    shards met on the way are returned too. Empty for a feed that does not exist yet.
    """
    return FeedTable.for_name(spark, table).heads(shards)


def committed_batches(spark: Any, table: str, fmt: str = "parquet") -> list[int]:
    """The committed batch numbers of the existing feed ``table`` of format ``fmt``,
    ascending, with no data read (:meth:`FeedTable.committed_batches`)."""
    return FeedTable.for_name(spark, table).committed_batches(fmt)


def newest_heads(
    spark: Any, table: str, batches: list[int], shards: Iterable[int] | None
) -> dict[int, bytes]:
    """Heads read from the newest of ``batches`` backwards until every shard of
    ``shards`` is found (:meth:`FeedTable.newest_heads`)."""
    return FeedTable.for_name(spark, table).newest_heads(batches, shards)


def next_batch(spark: Any, table: str) -> int:
    """The batch number of the next write: 1 + the highest committed batch (1 if none)."""
    return FeedTable.for_name(spark, table).next_batch()


def clear_orphan_location(spark: Any, table: str) -> None:
    """Delete the managed location of a table that is not in the catalog (protocol 11.5).

    A killed ``create table ... as select`` leaves files there, after which Spark refuses
    to create the table. Does nothing if the table exists
    (:meth:`FeedTable.clear_orphan_location`).
    """
    FeedTable.for_name(spark, table).clear_orphan_location()


def write_batch(spark: Any, table: str, events: Any) -> int:
    """Write ``events`` to the parquet feed ``table`` as one batch; return its number.

    ``events`` is a DataFrame with ``shard_id`` (int), ``ulid`` (16-byte binary) and any
    key/payload columns (no ``changefeed_batch``). The table is created on the first
    write. The batch commits when its partition is registered, so a write killed at any
    moment leaves nothing visible, and calling this again writes the same batch number.
    Returns 0 and writes nothing for an empty DataFrame. Raises :class:`FeedOrderError`
    if an event is not above its shard's head (the feed must only move forward).
    """
    feed = FeedTable.for_name(spark, table)
    table = feed.name.sql
    names = [field.name for field in events.schema.fields]
    lowered = [n.lower() for n in names]
    for required, kind in ((SHARD_COLUMN, "int"), (ULID_COLUMN, "binary")):
        if required not in lowered:
            raise ValueError(f"events need a {required} column ({kind}); got {names}")
    if BATCH_COLUMN in lowered:
        raise ValueError(f"events may not carry {BATCH_COLUMN}: the writer assigns it")
    types = {f.name.lower(): f.dataType.simpleString() for f in events.schema.fields}
    if types[SHARD_COLUMN] != "int" or types[ULID_COLUMN] != "binary":
        raise ValueError(
            f"{SHARD_COLUMN} must be int and {ULID_COLUMN} binary; got "
            f"{types[SHARD_COLUMN]} and {types[ULID_COLUMN]}"
        )
    view = "changefeed_write_batch_events"
    events.createOrReplaceTempView(view)
    stats = spark.sql(
        f"select {SHARD_COLUMN}, min({ULID_COLUMN}) as low, count(*) as n, "
        f"sum(case when length({ULID_COLUMN}) = 16 then 0 else 1 end) as bad "
        f"from {view} group by {SHARD_COLUMN}"
    ).collect()
    if not stats:
        return 0
    exists = feed.exists()  # asked once: a missing table costs the catalog a listing
    shards = [int(row[0]) for row in stats if row[0] is not None]
    heads = feed.committed_heads(shards, feed.format())[0] if exists else {}
    for row in stats:
        shard, low, bad = row[0], row[1], row[3]
        if shard is None or bad:
            raise ValueError("every event needs a shard_id and a 16-byte ulid")
        head = heads.get(int(shard))
        if head is not None and bytes(low) <= head:
            raise FeedOrderError(
                f"{feed.name.text} shard {shard}: event {bytes(low).hex()} is not above the head "
                f"{head.hex()}; a feed only moves forward"
            )
    if not exists:
        spark.sql(f"create schema if not exists {feed.name.namespace_sql}")
        others = [n for n in names if n.lower() not in (SHARD_COLUMN, ULID_COLUMN)]
        created = ", ".join(f"`{n}`" for n in [SHARD_COLUMN, ULID_COLUMN, *others])
        feed.clear_orphan_location()
        spark.sql(
            f"create table {table} using parquet partitioned by ({BATCH_COLUMN}) as "
            f"select {created}, cast(null as bigint) as {BATCH_COLUMN} from {view} where false"
        )
    # Insert by the table's column order (insert ... select is positional).
    table_columns = [c for c in spark.table(table).columns if c.lower() != BATCH_COLUMN]
    missing = sorted({c.lower() for c in table_columns} - set(lowered))
    if missing:
        raise ValueError(f"events lack the feed's columns {missing}")
    columns = ", ".join(f"`{c}`" for c in table_columns)
    batch = feed.next_batch()
    previous = spark.conf.get("spark.sql.sources.partitionOverwriteMode")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.sql(
            f"insert overwrite table {table} partition ({BATCH_COLUMN}) "
            f"select {columns}, cast({batch} as bigint) as {BATCH_COLUMN} from {view}"
        )
    finally:
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", previous)
    return batch
