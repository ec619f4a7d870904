"""How a landing follows its source's payload columns into an existing landed table
(docs/spark-source.md "When the source's columns change", docs/protocol.md 11.11).

* :func:`plan` compares the table's payload columns with the source's now: a column
  added, dropped, or widened where the table's format can widen it is a change the table
  follows; a rename, a narrowing or another type change stops the landing, naming it.
* :func:`apply` records the new schema version first (its first batch is the batch about
  to be written) and then alters the table, so that a run killed in between finds the
  version recorded and completes the same one;
* :func:`conform_frame` and :func:`conform_arrow` give a batch the table's payload shape:
  its columns in the table's order, a dropped one null, each of the table's type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from changefeed.spark.feedtable import (
    BATCH_COLUMN,
    NUMBERS_PROPERTY,
    VERSION_PREFIX,
    VERSION_PROPERTY,
    SchemaVersion,
    TableName,
    dropped_columns,
    numbers_properties,
    properties_sql,
    quote,
    schema_versions,
    source_numbers,
)
from changefeed.spark.source import ChangefeedSourceError

PAYLOAD = "payload"
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
#: The Hive metastore setting without which it refuses a struct's new fields.
HIVE_TYPE_CHANGES = "hive.metastore.disallow.incompatible.col.type.changes"


@dataclass(frozen=True)
class Evolution:
    """What a landing changes in a table for its source's payload columns now: ``added``
    (name, type as the table stores it), ``dropped`` (kept, null from now on), ``widened``
    (name, type before, type now), and the source's column ``numbers`` to record."""

    added: tuple[tuple[str, Any], ...] = ()
    dropped: tuple[str, ...] = ()
    widened: tuple[tuple[str, Any, Any], ...] = ()
    numbers: Mapping[str, int] | None = None
    #: added columns the table holds already (dropped before, in the source again)
    returning: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.added or self.dropped or self.widened or self.returning)

    def text(self) -> str:
        """The changes in words, for the landing's log line."""
        parts = [f"source column {n} {t.simpleString()} added" for n, t in self.added]
        parts += [f"source column {n} is back" for n in self.returning]
        parts += [f"source column {n} widened from {a.simpleString()} to {b.simpleString()}"
                  for n, a, b in self.widened]  # fmt: skip
        parts += [f"source column {n} dropped (kept, null from now on)" for n in self.dropped]
        return "; ".join(parts)


def widens(before: Any, after: Any, fmt: str) -> bool:
    """Whether a ``fmt`` table can change a column of type ``before`` to ``after`` in
    place (every value of ``before`` a value of ``after``): Delta (type widening) and
    Iceberg can, each its own set; a parquet table in a Hive metastore cannot.

    >>> from pyspark.sql import types as T
    >>> widens(T.IntegerType(), T.LongType(), "iceberg")
    True
    >>> widens(T.LongType(), T.IntegerType(), "delta")
    False
    >>> widens(T.DecimalType(10, 2), T.DecimalType(12, 3), "delta")
    True
    >>> widens(T.DecimalType(10, 2), T.DecimalType(12, 3), "iceberg")  # Iceberg keeps the scale
    False
    >>> widens(T.IntegerType(), T.LongType(), "parquet")
    False
    """
    from pyspark.sql import types as T

    if fmt not in ("delta", "iceberg"):
        return False
    old, new = before.simpleString(), after.simpleString()
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL.index(new) > _INTEGRAL.index(old)
    if (old, new) == ("float", "double"):
        return True
    if isinstance(before, T.DecimalType) and isinstance(after, T.DecimalType):
        if fmt == "iceberg":
            return after.scale == before.scale and after.precision > before.precision
        integral_before = before.precision - before.scale
        integral_after = after.precision - after.scale
        return (after.scale >= before.scale and integral_after >= integral_before
                and (after.precision, after.scale) != (before.precision, before.scale))  # fmt: skip
    return False


def payload_type(schema: Any) -> Any:
    """The ``payload`` struct of a landed (or source) schema, or None."""
    from pyspark.sql import types as T

    for field in schema.fields:
        if field.name.lower() == PAYLOAD and isinstance(field.dataType, T.StructType):
            return field.dataType
    return None


def stored_type(data_type: Any, fmt: str) -> Any:
    """The type a table of format ``fmt`` holds a column of ``data_type`` as, which is what
    Spark reads back: Iceberg has no ``tinyint`` or ``smallint`` and stores them as
    ``int``; ``char(n)`` and ``varchar(n)`` are ``string`` in every format. Spark's write
    casts the feed's values to the table's wider type."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        fields = data_type.fields
        return T.StructType([T.StructField(f.name, stored_type(f.dataType, fmt), f.nullable)
                             for f in fields])  # fmt: skip
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(stored_type(data_type.elementType, fmt), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        key, value = stored_type(data_type.keyType, fmt), stored_type(data_type.valueType, fmt)
        return T.MapType(key, value, data_type.valueContainsNull)
    if isinstance(data_type, T.CharType | T.VarcharType):
        return T.StringType()
    if fmt == "iceberg" and isinstance(data_type, T.ByteType | T.ShortType):
        return T.IntegerType()
    return data_type


def plan(
    table_payload: Any,
    source_payload: Any,
    fmt: str,
    properties: Mapping[str, str],
    numbers: Mapping[str, int] | None,
) -> tuple[Evolution, list[str]]:
    """What the table changes to follow ``source_payload`` (the source's payload struct
    now), and what stops it (a rename, a narrowing, another type change; empty when it
    can follow)."""
    before = {f.name.lower(): f for f in table_payload.fields}
    now = {f.name.lower(): f for f in source_payload.fields}
    gone = dropped_columns(schema_versions(properties))
    recorded = source_numbers(properties)
    refusals: list[str] = []
    added: list[tuple[str, Any]] = []
    returning: list[str] = []
    widened: list[tuple[str, Any, Any]] = []
    for name, field in now.items():
        new_type = stored_type(field.dataType, fmt)
        if name not in before:
            added.append((field.name, new_type))
            continue
        old_type = before[name].dataType
        if old_type.simpleString() == new_type.simpleString():
            if name in gone:
                returning.append(before[name].name)
            continue
        change = (f"source column {name} is {new_type.simpleString()} now, "
                  f"{old_type.simpleString()} in the table")  # fmt: skip
        if widens(old_type, new_type, fmt):
            widened.append((before[name].name, old_type, new_type))
        elif widens(new_type, old_type, "delta") or widens(new_type, old_type, "iceberg"):
            refusals.append(f"{change} (a narrowing: not every value of the table's type fits)")
        elif widens(old_type, new_type, "delta") or widens(old_type, new_type, "iceberg"):
            refusals.append(f"{change} (a {fmt} table cannot widen a column's type in place; "
                            "a Delta or Iceberg table can)")  # fmt: skip
        else:
            refusals.append(f"{change} (not a widening)")
    dropped = [before[n].name for n in before if n not in now and n not in gone]
    new_names = [n for n, _ in added]
    if recorded is not None and numbers is not None:
        by_number = {number: name for name, number in recorded.items()}
        for name in new_names:
            old_name = by_number.get(numbers.get(name, -1))
            if old_name is not None and old_name.lower() not in now:
                refusals.append(f"source column {old_name} was renamed to {name}")
    elif dropped and new_names:
        both = {n: number for n, number in (numbers or {}).items() if n.lower() in before}
        known = numbers_properties(both).get(NUMBERS_PROPERTY, "")
        refusals.append(
            f"source column(s) {', '.join(dropped)} dropped and {', '.join(new_names)} added, "
            "and the table records no source column numbers that would tell this from a rename"
            + (
                f" (if it is no rename, record the numbers of the columns both have: alter "
                f"table ... set tblproperties ('{NUMBERS_PROPERTY}' = '{known}'), and land "
                "again)"
                if known
                else ""
            )
        )
    evolution = Evolution(tuple(added), tuple(dropped), tuple(widened), numbers, tuple(returning))
    return evolution, refusals


def apply(
    spark: Any,
    table: TableName,
    fmt: str,
    evolution: Evolution,
    batch: int,
    properties: Mapping[str, str],
    table_schema: Any,
) -> SchemaVersion | None:
    """Record the table's new schema version (first batch ``batch``) and the source's
    column numbers, then add and widen its payload columns. Returns the version recorded
    (None when only the numbers were). Idempotent: a run killed half-way finds the
    version recorded for the same batch and completes it."""
    found = schema_versions(properties)
    current = found[-1]
    props: dict[str, str] = {}
    version = None
    if evolution.changes:
        added = tuple(n for n, _ in evolution.added) + evolution.returning
        widened = {n: a.simpleString() for n, a, _ in evolution.widened}
        if current.version > 1 and current.first_batch == batch:
            # recorded by a run that was killed before it landed this batch: the same version
            version = SchemaVersion(
                current.version, batch, _union(current.added, added),
                _union(current.dropped, evolution.dropped), {**widened, **current.widened},
            )  # fmt: skip
        else:
            version = SchemaVersion(current.version + 1, batch, added, evolution.dropped, widened)
        props[VERSION_PROPERTY] = str(version.version)
        props[f"{VERSION_PREFIX}{version.version}"] = version.to_json()
    if evolution.numbers is not None and dict(evolution.numbers) != source_numbers(properties):
        props.update(numbers_properties(evolution.numbers))
    if evolution.widened and fmt == "delta":
        props["delta.enableTypeWidening"] = "true"
    if props:
        spark.sql(f"alter table {table.sql} set tblproperties ({properties_sql(props)})")
        if NUMBERS_PROPERTY not in props and NUMBERS_PROPERTY in properties:
            # the numbers now span parts; the single property would be read first
            spark.sql(f"alter table {table.sql} unset tblproperties ('{NUMBERS_PROPERTY}')")
    if evolution.added:
        _add_columns(spark, table, fmt, evolution.added, table_schema)
    for name, _, new_type in evolution.widened:
        spark.sql(f"alter table {table.sql} alter column {PAYLOAD}.{quote(name)} "
                  f"type {new_type.simpleString()}")  # fmt: skip
    if evolution.added or evolution.widened:
        spark.catalog.refreshTable(table.sql)
    return version


def _union(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    return first + tuple(n for n in second if n not in first)


def _add_columns(
    spark: Any, table: TableName, fmt: str, added: tuple[tuple[str, Any], ...], table_schema: Any
) -> None:
    """Add payload fields at the end of the struct: Delta and Iceberg by SQL; a parquet
    table through the session catalog (Spark's SQL adds no nested field to it), which a
    Hive metastore allows only with :data:`HIVE_TYPE_CHANGES` false."""
    if fmt != "parquet":
        columns = ", ".join(f"{PAYLOAD}.{quote(n)} {t.simpleString()}" for n, t in added)
        spark.sql(f"alter table {table.sql} add columns ({columns})")
        return
    from pyspark.sql import types as T

    fields = []
    for field in table_schema.fields:
        if field.name.lower() == BATCH_COLUMN:
            continue
        if field.name.lower() == PAYLOAD:
            children = list(field.dataType.fields) + [T.StructField(n, t, True) for n, t in added]
            field = T.StructField(field.name, T.StructType(children), True)
        fields.append(field)
    try:
        session = spark._jsparkSession
        identifier = spark._jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(
            table.table, spark._jvm.scala.Some(table.database)
        )
        schema = session.parseDataType(T.StructType(fields).json())
        session.sessionState().catalog().alterTableDataSchema(identifier, schema)
    except Exception as exc:
        cause = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ChangefeedSourceError(
            f"cannot add the source's new columns ({', '.join(n for n, _ in added)}) to the "
            f"payload of the parquet table {table.text}: {cause}. A Hive metastore refuses a "
            f"struct's new fields unless {HIVE_TYPE_CHANGES} is false (changefeed's shared "
            "catalog and local sessions set it; set it on this metastore), and Spark Connect "
            "cannot add them to a parquet table at all; else land the feed into a Delta or "
            "Iceberg table from a snapshot (docs/spark-source.md, 'When the source's columns "
            "change')"
        ) from None


def same_shape(table_payload: Any, source_payload: Any, fmt: str) -> bool:
    """Whether a batch read with the source's payload lands into the table as it is (the
    same names in the same order, each of the type the table stores it as)."""
    if len(table_payload.fields) != len(source_payload.fields):
        return False
    return all(
        a.name.lower() == b.name.lower()
        and a.dataType.simpleString() == stored_type(b.dataType, fmt).simpleString()
        for a, b in zip(table_payload.fields, source_payload.fields, strict=True)
    )


def landed_schema(schema: Any, payload: Any) -> Any:
    """``schema`` (a batch's, as read) with its payload given the table's shape ``payload``
    (None: as it is)."""
    from pyspark.sql import types as T

    if payload is None:
        return schema
    return T.StructType([T.StructField(f.name, payload, True) if f.name.lower() == PAYLOAD
                         else f for f in schema.fields])  # fmt: skip


def conform_frame(frame: Any, payload: Any) -> Any:
    """``frame`` with its payload in the table's shape ``payload``: the table's fields in
    its order, each cast to its type, a field the source no longer has null; a null
    payload (a deleted row) stays null."""
    from pyspark.sql import functions as F

    present = {f.name.lower(): f.name for f in payload_type(frame.schema).fields}
    column = F.col(PAYLOAD)
    children = [
        (column[present[f.name.lower()]] if f.name.lower() in present else F.lit(None))
        .cast(f.dataType)
        .alias(f.name)
        for f in payload.fields
    ]
    value = F.when(column.isNull(), F.lit(None).cast(payload)).otherwise(F.struct(*children))
    return frame.withColumn(PAYLOAD, value)


def conform_arrow(events: Any, payload: Any) -> Any:
    """:func:`conform_frame` for an Arrow table or record batch."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    from pyspark.sql.pandas.types import to_arrow_type

    index = events.schema.get_field_index(PAYLOAD)
    array = events.column(index)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    flat = array.flatten()  # each field with the struct's nulls and offset applied
    position = {array.type.field(i).name.lower(): i for i in range(array.type.num_fields)}
    children, fields = [], []
    for field in payload.fields:
        arrow_type = to_arrow_type(field.dataType, timestamp_utc=True)
        at = position.get(field.name.lower())
        child = flat[at] if at is not None else pa.nulls(len(array), arrow_type)
        if child.type != arrow_type:
            child = child.cast(arrow_type)
        children.append(child)
        fields.append(pa.field(field.name, arrow_type, True))
    value = pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    columns = [value if i == index else events.column(i) for i in range(events.num_columns)]
    schema = events.schema.set(index, pa.field(PAYLOAD, value.type, True))
    if isinstance(events, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)
