"""The Spark feed format of docs/protocol.md section 11, as the landing writes it.

Everything the landing knows about the format lives here:

* the table: ``shard_id int, ulid binary, <key columns>, [payload struct], changefeed_batch
  bigint`` (last), a managed parquet, Delta or Iceberg catalog table ``partitioned by
  (changefeed_batch)`` (11.1);
* the commit: one write = one batch ``N = 1 + max(changefeed_batch)`` of the committed
  rows. parquet: written with ``insert overwrite`` in dynamic partition-overwrite mode,
  so the partition registration is the commit point and a killed write re-run replaces
  its unregistered directory (11.2). Delta and Iceberg: appended in one transaction, so
  a killed write leaves nothing to replace;
* the heads: per shard ``max(ulid)`` over the committed rows, which is the feed's safe
  point and the landing's cursor (11.3, 11.6), read from the newest batches backwards
  until every shard is found, so a landing reads its newest batches, not the table
  (:meth:`FeedTable.committed_heads`, as every writer reads them);
* the first-write cleanup of an orphaned table location (11.5,
  :meth:`FeedTable.clear_orphan_location`);
* the feed identity: the table properties ``changefeed.feed`` and ``changefeed.source``
  name the feed the table holds and the database it comes from, so landing another feed
  into it is refused.

The column names come from :mod:`changefeed.spark.feedtable` (the format's Python module).
Its ``write_batch`` is not used for the write itself: it checks F3 with a separate
Spark job over the events, which for a database source would read every event from
the database twice. Here F3 holds by construction (each shard is read strictly after
its committed head), so the batch is written in one pass.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from changefeed.spark.feedtable import (
    BATCH_COLUMN,
    FORMATS,
    OPERATION_COLUMN,
    RESERVED_COLUMNS,
    FeedTable,
    FeedTableNameError,
    TableName,
    numbers_properties,
    properties_sql,
    quote,
    source_numbers,
    sql_string,
)
from changefeed.spark.landing._evolution import PAYLOAD, Evolution, payload_type, plan, stored_type
from changefeed.spark.source import ChangefeedSourceError

RESERVED = RESERVED_COLUMNS


#: The table properties of a landed table's feed identity.
FEED_PROPERTY = "changefeed.feed"
SOURCE_PROPERTY = "changefeed.source"


@dataclass(frozen=True)
class FeedIdentity:
    """The feed a landed table holds: its id and its database (:meth:`Backend.source_identity`
    and the changefeed schema; never a host or a credential)."""

    feed: str
    source: str

    def properties(self) -> dict[str, str]:
        return {FEED_PROPERTY: self.feed, SOURCE_PROPERTY: self.source}


def parse_table(spark: Any, name: str) -> TableName:
    """``catalog.database.table``, ``database.table`` or ``table`` (in the session's
    current database); a malformed name is the landing's error."""
    try:
        return TableName.parse(spark, name)
    except FeedTableNameError as exc:
        raise ChangefeedSourceError(f"target table: {exc}") from None


def parse_qualified_table(name: str) -> TableName | None:
    """:func:`parse_table` before Spark has started: None for a bare ``table``."""
    try:
        return TableName.parse_qualified(name)
    except FeedTableNameError as exc:
        raise ChangefeedSourceError(f"target table: {exc}") from None


def choose_format(spark: Any, table: TableName, requested: str | None, exists: bool) -> str:
    """The landed table's format: an existing table's own (``requested`` must agree), else
    ``requested``, else Iceberg in a catalog other than the session's and parquet in it."""
    if requested is not None and requested not in FORMATS:
        raise ChangefeedSourceError(
            f"table format {requested!r} is not one of {', '.join(FORMATS)}"
        )
    if exists:
        try:
            actual = FeedTable(spark, table).format()
        except ValueError as exc:
            raise ChangefeedSourceError(f"cannot land into {table.text}: {exc}") from None
        if requested is not None and requested != actual:
            raise ChangefeedSourceError(
                f"table {table.text} is a {actual} table, not {requested}: land into a new "
                f"table, or leave the format out to keep landing into this one"
            )
        return actual
    if not table.in_session_catalog:
        if requested not in (None, "iceberg"):
            raise ChangefeedSourceError(
                f"table {table.text} is in catalog {table.catalog}, which holds Iceberg "
                f"tables; a {requested} table goes in the session catalog (database.table)"
            )
        return "iceberg"
    if requested == "iceberg":
        raise ChangefeedSourceError(
            f"an Iceberg table is named with its catalog (e.g. iceberg.{table.database}."
            f"{table.table}); {table.text} would be in the session catalog"
        )
    return requested or "parquet"


def feed_table_schema(source_schema: Any) -> Any:
    """The landed table's schema: the source's columns, then ``changefeed_operation
    string`` (:mod:`changefeed.spark.feedtable`; a table landed before it existed has none,
    which :func:`check_table` accepts), then ``changefeed_batch bigint``."""
    from pyspark.sql import types as T

    for field in source_schema.fields[2:]:
        if field.name.lower() in RESERVED:
            raise ChangefeedSourceError(
                f"column {field.name!r} of the feed has a name that the Spark feed format "
                f"reserves ({', '.join(RESERVED)}); it cannot be landed"
            )
    fields = [T.StructField(f.name, f.dataType, True) for f in source_schema.fields]
    fields.append(T.StructField(OPERATION_COLUMN, T.StringType(), True))
    fields.append(T.StructField(BATCH_COLUMN, T.LongType(), True))
    return T.StructType(fields)


def check_partition_management(spark: Any) -> None:
    """Readers, the landing's own cursor included, must list registered partitions only
    (11.1): with ``spark.sql.hive.manageFilesourcePartitions=false`` Spark would read the
    directory a killed write left behind, and the landing would skip its events."""
    value = str(spark.conf.get("spark.sql.hive.manageFilesourcePartitions", "true")).lower()
    if value == "false":
        raise ChangefeedSourceError(
            "spark.sql.hive.manageFilesourcePartitions is false, so Spark would read "
            "unregistered partition directories (a killed run's output); set it to true "
            "(the default) to land feeds"
        )


@dataclass(frozen=True)
class TableCheck:
    """An existing landed table as :func:`check_table` found it: whether it has the
    operation column, the change that makes it follow its source's payload columns (None
    when there is nothing to record), its schema and its properties as read."""

    operation: bool
    evolution: Evolution | None
    schema: Any
    properties: dict[str, str]


def check_table(
    spark: Any,
    table: TableName,
    expected: Any,
    fmt: str,
    properties: dict[str, str],
    feed: str | None = None,
    numbers: dict[str, int] | None = None,
) -> TableCheck:
    """An existing table must have the format's columns (each of the type the table's
    format stores it as, :func:`stored_type`) and partitioning. Its payload follows the
    source's columns (:mod:`._evolution`: added, dropped, widened where the format can);
    any other difference (the key, payload on or off, a rename, a narrowing) is refused
    before anything is written, naming each change and the way on: a new table, filled
    by a snapshot. ``properties``: the table's (:func:`table_properties`, read once by the
    caller); ``numbers``: the source's column numbers (tells a rename).

    A table landed before the operation column existed has the same columns without it,
    and is landed on in its own shape."""
    from pyspark.sql import types as T

    actual = spark.table(table.sql).schema
    got = [(f.name.lower(), f.dataType.simpleString()) for f in actual.fields]
    want = [(f.name.lower(), stored_type(f.dataType, fmt).simpleString()) for f in expected.fields]
    operation = OPERATION_COLUMN in [name for name, _ in got]
    if not operation:
        want = [column for column in want if column[0] != OPERATION_COLUMN]
        expected = T.StructType([f for f in expected.fields if f.name != OPERATION_COLUMN])
    old_payload, new_payload = payload_type(actual), payload_type(expected)
    same_frame = [c for c in got if c[0] != PAYLOAD] == [c for c in want if c[0] != PAYLOAD]
    if not same_frame or (old_payload is None) != (new_payload is None):
        _refuse(table, feed, schema_changes(actual, expected, fmt))
    evolution = None
    if old_payload is not None:
        evolution, refusals = plan(old_payload, new_payload, fmt, properties, numbers)
        if refusals:
            _refuse(table, feed, refusals)
        if not evolution.changes and (numbers is None or numbers == source_numbers(properties)):
            evolution = None
    partitions = [c.name.lower() for c in spark.catalog.listColumns(table.sql)
                  if c.isPartition]  # fmt: skip
    if partitions != [BATCH_COLUMN]:
        raise ChangefeedSourceError(
            f"table {table.text} must be partitioned by {BATCH_COLUMN} and nothing else "
            f"(docs/protocol.md 11.1); it is partitioned by {partitions or 'nothing'}"
        )
    return TableCheck(operation, evolution, actual, properties)


def _refuse(table: TableName, feed: str | None, changes: list[str]) -> NoReturn:
    target = f"{table.text}_v2"
    raise ChangefeedSourceError(
        f"table {table.text} was landed with other columns than feed {feed or '(this feed)'} "
        f"has now: {'; '.join(changes)}. A landed table follows a source column added, "
        "dropped or widened, not this: land the feed into a new table from a snapshot of "
        f"the source (changefeed snapshot --feed {feed or 'FEED'} --table {target}), point "
        "the consumers at it and rebuild the state models on it (dbt run --full-refresh); "
        "docs/spark-source.md, 'When the source's columns change'"
    )


def schema_changes(actual: Any, expected: Any, fmt: str) -> list[str]:
    """What differs between a landed table's columns (``actual``) and the feed's now
    (``expected``, :func:`feed_table_schema`), in words: the key, payload on or off, and
    per payload column added, dropped or of another type.

    >>> from pyspark.sql import types as T
    >>> def table(*payload):
    ...     return T.StructType([T.StructField("shard_id", T.IntegerType()),
    ...         T.StructField("ulid", T.BinaryType()), T.StructField("id", T.LongType()),
    ...         T.StructField("payload", T.StructType([T.StructField(n, t) for n, t in payload])),
    ...         T.StructField("changefeed_batch", T.LongType())])
    >>> schema_changes(table(("id", T.LongType()), ("v", T.IntegerType())),
    ...                table(("id", T.LongType()), ("v", T.LongType()), ("note", T.StringType())),
    ...                "parquet")
    ['source column v is bigint now, int in the table', 'source column note string added']
    """
    from pyspark.sql import types as T

    def typed(field: Any) -> str:
        return str(stored_type(field.dataType, fmt).simpleString())

    def split(schema: Any) -> tuple[list[tuple[str, str]], Any]:
        keys, payload = [], None
        for f in schema.fields[2:]:
            if f.name.lower() == "payload" and isinstance(f.dataType, T.StructType):
                payload = f.dataType
            elif f.name.lower() not in (BATCH_COLUMN, OPERATION_COLUMN):
                keys.append((f.name.lower(), typed(f)))
        return keys, payload

    (old_keys, old_payload), (new_keys, new_payload) = split(actual), split(expected)
    changes = []
    if old_keys != new_keys:
        changes.append(
            f"the feed's key is ({_listed(new_keys)}), the table's ({_listed(old_keys)})"
        )
    if (old_payload is None) != (new_payload is None):
        changes.append(
            "the table was landed without payloads, the landing now has them (--payload)"
            if old_payload is None
            else "the table was landed with payloads, the landing now has none (--payload)"
        )
    elif old_payload is not None:
        before = {f.name.lower(): typed(f) for f in old_payload.fields}
        now = {f.name.lower(): typed(f) for f in new_payload.fields}
        for name, kind in now.items():
            if name in before and before[name] != kind:
                changes.append(f"source column {name} is {kind} now, {before[name]} in the table")
        changes += [f"source column {n} {k} added" for n, k in now.items() if n not in before]
        changes += [f"source column {n} dropped" for n in before if n not in now]
    if not changes:
        got = ", ".join(f"{f.name} {typed(f)}" for f in actual.fields)
        changes.append(f"its columns are {got}; the feed's are "
                       f"{', '.join(f'{f.name} {typed(f)}' for f in expected.fields)}")  # fmt: skip
    return changes


def _listed(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{n} {t}" for n, t in columns) or "none"


def check_identity(properties: Mapping[str, str], table: TableName, identity: FeedIdentity) -> bool:
    """Refuse a table whose ``properties`` (:func:`table_properties`) say it holds another
    feed (or the same feed of another database); return whether it records no feed yet
    (landed before the identity was recorded, or created by hand), which
    :func:`record_identity` then records."""
    feed, source = properties.get(FEED_PROPERTY), properties.get(SOURCE_PROPERTY)
    if feed is None and source is None:
        return True
    if (feed, source) == (identity.feed, identity.source):
        return False
    fix = f"land into another table, or drop {table.text} and land it again"
    if feed == identity.feed:
        fix += (
            f" (if the database was restored or moved, keep the table with: alter table "
            f"{table.text} set tblproperties ('{SOURCE_PROPERTY}' = "
            f"'{sql_string(identity.source)}'))"
        )
    raise ChangefeedSourceError(
        f"table {table.text} holds feed {feed or '(none)'} of {source or '(none)'}, not feed "
        f"{identity.feed} of "
        f"{identity.source}: {fix}"
    )


def record_identity(spark: Any, table: TableName, identity: FeedIdentity) -> None:
    spark.sql(
        f"alter table {table.sql} set tblproperties ({properties_sql(identity.properties())})"
    )


#: Held while a schema is created: a landing service's feeds create their tables from
#: threads of one driver, and two `create database if not exists` of one new schema at
#: once make Hive's metastore log an AlreadyExistsException with its stack trace (the
#: schema is created either way).
_NAMESPACES = threading.Lock()


def create_table(
    spark: Any,
    table: TableName,
    schema: Any,
    fmt: str,
    identity: FeedIdentity,
    numbers: dict[str, int] | None = None,
) -> None:
    """Create the empty feed table in format ``fmt``, recording its feed (and the source's
    column ``numbers``, :mod:`._evolution`), first clearing debris of a killed earlier
    create in the session catalog's managed location (11.5)."""
    namespace = table.namespace_sql
    with _NAMESPACES:
        spark.sql(f"create database if not exists {namespace}")
    if table.in_session_catalog:
        FeedTable(spark, table).clear_orphan_location()
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
    properties = {**identity.properties(), **(numbers_properties(numbers) if numbers else {})}
    spark.sql(
        f"create table {table.sql} ({columns}) using {fmt} partitioned by ({BATCH_COLUMN}) "
        f"tblproperties ({properties_sql(properties)})"
    )


def write_batch(frame: Any, table: TableName, batch: int, fmt: str) -> None:
    """Commit ``frame`` as batch ``batch``.

    parquet: one new partition, registered at job commit. Dynamic partition overwrite
    replaces only ``changefeed_batch=<batch>``: the directory a killed attempt of the
    same batch may have left (never registered) is replaced, and no registered batch is
    touched (a new batch is always above every registered one). Delta and Iceberg: one
    append transaction, which a kill leaves uncommitted, so there is nothing to replace.
    """
    from pyspark.sql import functions as F

    if fmt != "parquet":
        frame.withColumn(BATCH_COLUMN, F.lit(batch).cast("bigint")).write.insertInto(table.sql)
        return
    spark = frame.sparkSession
    conf = "spark.sql.sources.partitionOverwriteMode"
    previous = spark.conf.get(conf, None)
    spark.conf.set(conf, "dynamic")
    try:
        frame.withColumn(BATCH_COLUMN, F.lit(batch).cast("bigint")).write.insertInto(
            table.sql, overwrite=True
        )
    finally:
        if previous is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, previous)


def count_batch(spark: Any, table: TableName, batch: int) -> int:
    return int(
        spark.sql(f"select count(*) from {table.sql} where {BATCH_COLUMN} = {int(batch)}").first()[
            0
        ]
    )
