"""The commit rule of a Spark feed (docs/protocol.md 11.2, 11.3 and 11.5) in PySpark."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from changefeed.errors import ChangefeedError
from changefeed.spark.feedtable._catalog import table_exists

SHARD_COLUMN: Final = "shard_id"
ULID_COLUMN: Final = "ulid"
BATCH_COLUMN: Final = "changefeed_batch"
RESERVED_COLUMNS: Final = (SHARD_COLUMN, ULID_COLUMN, BATCH_COLUMN)
#: The table formats a Spark feed may have; the last two commit atomically (ACID).
FORMATS: Final = ("parquet", "delta", "iceberg")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")


class FeedOrderError(ChangefeedError, ValueError):
    """A batch would put an event at or below its shard's head (invariant F3)."""


def _table(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"a feed table is named 'catalog.schema.table', 'schema.table' or 'table'; got {name!r}"
        )
    return name


def table_format(spark: Any, table: str) -> str:
    """The format of an existing feed table: ``parquet``, ``delta`` or ``iceberg``
    (its catalog's provider; anything else is refused, naming the formats)."""
    for row in spark.sql(f"describe table extended {table}").collect():
        if str(row[0]).strip().lower() == "provider":
            provider = str(row[1]).strip().lower()
            if provider in FORMATS:
                return provider
            raise ValueError(f"{table} is a {provider} table; a Spark feed is {', '.join(FORMATS)}")
    return "parquet"


def feed_heads(spark: Any, table: str, shards: Iterable[int] | None = None) -> dict[int, bytes]:
    """Each shard's head (= safe point): max(ulid) over the committed rows.

    With ``shards``, only those shards' heads are looked for, newest batches first, and
    the reading stops once every one is found: a shard's head is in the newest batch that
    has the shard (F3), so a feed whose shards all wrote recently costs its newest batch,
    whatever its size. A shard without rows makes it read every batch. Heads of other
    shards met on the way are returned too. Empty for a feed that does not exist yet.
    """
    table = _table(table)
    if not table_exists(spark, table):
        return {}
    spark.sql(f"refresh table {table}")
    batches = committed_batches(spark, table, table_format(spark, table))
    return newest_heads(spark, table, batches, shards)


def committed_batches(spark: Any, table: str, fmt: str = "parquet") -> list[int]:
    """The committed batch numbers, ascending, with no data read.

    ``table`` is an existing feed table's name, ready for SQL, in format ``fmt``
    (:func:`table_format`). parquet: the metastore's partition list, where registration
    is the commit. Delta and Iceberg commit atomically and have no partition list in the
    metastore: the range from the lowest to the highest batch, from ``min``/``max`` of
    the partition column (answered from file statistics); a feed's batches are
    contiguous, since each write is 1 + the highest and retention removes the lowest.
    """
    if fmt != "parquet":
        row = spark.sql(f"select min({BATCH_COLUMN}), max({BATCH_COLUMN}) from {table}").first()
        return [] if row[0] is None else list(range(int(row[0]), int(row[1]) + 1))
    batches = []
    for row in spark.sql(f"show partitions {table}").collect():
        key, _, value = str(row[0]).partition("=")
        if key.lower() != BATCH_COLUMN or not value.isdigit():
            raise ValueError(
                f"{table} has the partition {row[0]!r}; a Spark feed is partitioned by "
                f"{BATCH_COLUMN} and nothing else (docs/protocol.md 11.1)"
            )
        batches.append(int(value))
    return sorted(batches)


def newest_heads(
    spark: Any, table: str, batches: list[int], shards: Iterable[int] | None
) -> dict[int, bytes]:
    """Heads read from the newest of ``batches`` backwards, in ranges that double (1, 2,
    4, ... batches), until every shard of ``shards`` is found; all batches when ``shards``
    is None. Each range is a literal partition filter, so Spark reads only its partitions.
    """
    wanted = None if shards is None else set(shards)
    heads: dict[int, bytes] = {}
    end, size = len(batches), 1
    while end > 0 and (wanted is None or not wanted <= heads.keys()):
        start = 0 if wanted is None else max(0, end - size)
        rows = spark.sql(
            f"select {SHARD_COLUMN}, max({ULID_COLUMN}) as head from {table} "
            f"where {BATCH_COLUMN} between {batches[start]} and {batches[end - 1]} "
            f"and {SHARD_COLUMN} is not null group by {SHARD_COLUMN}"
        ).collect()
        for row in rows:
            # a newer range has already given the shard's head (F3)
            heads.setdefault(int(row[0]), bytes(row[1]))
        end, size = start, size * 2
    return heads


def next_batch(spark: Any, table: str) -> int:
    """The batch number of the next write: 1 + the highest committed batch (1 if none)."""
    table = _table(table)
    if not table_exists(spark, table):
        return 1
    return max(committed_batches(spark, table, table_format(spark, table)), default=0) + 1


def _schema_location(spark: Any, schema: str) -> str:
    for row in spark.sql(f"describe schema extended `{schema}`").collect():
        if str(row[0]).strip().lower() in ("location", "database location", "namespace location"):
            return str(row[1]).strip()
    raise RuntimeError(f"could not find the location of schema {schema}")


def clear_orphan_location(spark: Any, table: str) -> None:
    """Delete the managed location of a table that is not in the catalog (protocol 11.5).

    A killed ``create table ... as select`` leaves files there, after which Spark refuses
    to create the table. Does nothing if the table exists.
    """
    table = _table(table)
    if table_exists(spark, table):
        return
    schema, _, name = table.rpartition(".")
    schema = schema or spark.catalog.currentDatabase()
    path = _schema_location(spark, schema).rstrip("/") + "/" + name.lower()
    cleanup = f"{schema}.{name.lower()}__changefeed_cleanup"
    spark.sql(f"create table if not exists {cleanup} (x int) using parquet")
    spark.sql(f"alter table {cleanup} set location '{path}'")
    # Empties the location, and creates it when missing (a clean first write): dropping a
    # table whose location does not exist logs "ERROR FileUtils: Failed to delete".
    spark.sql(f"truncate table {cleanup}")
    spark.sql(f"drop table if exists {cleanup}")


def write_batch(spark: Any, table: str, events: Any) -> int:
    """Write ``events`` to the parquet feed ``table`` as one batch; return its number.

    ``events`` is a DataFrame with ``shard_id`` (int), ``ulid`` (16-byte binary) and any
    key/payload columns (no ``changefeed_batch``). The table is created on the first
    write. The batch commits when its partition is registered, so a write killed at any
    moment leaves nothing visible, and calling this again writes the same batch number.
    Returns 0 and writes nothing for an empty DataFrame. Raises :class:`FeedOrderError`
    if an event is not above its shard's head (the feed must only move forward).
    """
    table = _table(table)
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
    heads = feed_heads(spark, table, [int(row[0]) for row in stats if row[0] is not None])
    for row in stats:
        shard, low, bad = row[0], row[1], row[3]
        if shard is None or bad:
            raise ValueError("every event needs a shard_id and a 16-byte ulid")
        head = heads.get(int(shard))
        if head is not None and bytes(low) <= head:
            raise FeedOrderError(
                f"{table} shard {shard}: event {bytes(low).hex()} is not above the head "
                f"{head.hex()}; a feed only moves forward"
            )
    if not table_exists(spark, table):
        schema = table.rpartition(".")[0]
        if schema:
            spark.sql(f"create schema if not exists {schema}")
        others = [n for n in names if n.lower() not in (SHARD_COLUMN, ULID_COLUMN)]
        created = ", ".join(f"`{n}`" for n in [SHARD_COLUMN, ULID_COLUMN, *others])
        clear_orphan_location(spark, table)
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
    batch = next_batch(spark, table)
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
