"""Database column types to Spark types, and pages of rows to Arrow record batches.

Every column a database can hold has a Spark type: the types below map exactly, and any
other type (``uuid``, ``json``, ``interval``, ``time``, unbounded ``numeric``, ...) is read
as its text. The mapping is part of the documented schema (docs/spark-source.md).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from changefeed.client.core import jsonb_text
from changefeed.errors import ChangefeedSourceError

Convert = Callable[[Any], Any]

_PARAMS = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


@dataclass(frozen=True)
class Column:
    """A column of the feed or of its source table: name and database type as declared,
    and for a source column the database's own number for it (PostgreSQL's ``attnum``,
    SQL Server's ``column_id``), which a rename keeps and a dropped and re-added column
    does not: how a landing tells a rename from a drop and an add."""

    name: str
    db_type: str
    number: int | None = field(default=None, compare=False)


def _identity(value: Any) -> Any:
    return value


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        # Arrays and json: every element as to_jsonb spells it (an array of numeric,
        # timestamptz or bytea too; Infinity and NaN as strings).
        return jsonb_text(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _upper_uuid(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    return _text(value)


def _binary(value: Any) -> Any:
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _decimal_or_text(precision: int | None, scale: int | None) -> tuple[str, Any]:
    if precision is not None and precision <= 38:
        return "decimal", (precision, scale or 0)
    return "string", None


def base_type(db_type: str) -> str:
    """A database type without its length, precision or scale, lower-cased.

    >>> base_type("TIMESTAMP(3) WITH TIME ZONE")
    'timestamp with time zone'
    >>> base_type("numeric(12, 2)")
    'numeric'
    """
    lowered = " ".join(db_type.lower().split())
    return " ".join(_PARAMS.sub("", lowered).replace(" ,", ",").split())


def spark_type_of(dialect: str, db_type: str) -> tuple[Any, Convert]:
    """The Spark type of a database type and the converter of one driver value.

    >>> spark_type_of("postgres", "numeric(12,2)")[0].simpleString()
    'decimal(12,2)'
    >>> spark_type_of("sqlserver", "datetime2(3)")[0].simpleString()
    'timestamp_ntz'
    >>> spark_type_of("postgres", "uuid")[0].simpleString()
    'string'
    """
    from pyspark.sql import types as T

    lowered = " ".join(db_type.lower().split())
    params = _PARAMS.search(lowered)
    base = base_type(db_type)
    precision = int(params.group(1)) if params else None
    scale = int(params.group(2)) if params and params.group(2) else None

    if dialect == "postgres":
        simple: dict[str, Any] = {
            "smallint": T.ShortType(), "int2": T.ShortType(),
            "integer": T.IntegerType(), "int": T.IntegerType(), "int4": T.IntegerType(),
            "bigint": T.LongType(), "int8": T.LongType(),
            "real": T.FloatType(), "float4": T.FloatType(),
            "double precision": T.DoubleType(), "float8": T.DoubleType(),
            "boolean": T.BooleanType(), "bool": T.BooleanType(),
            "date": T.DateType(),
            "timestamp": T.TimestampNTZType(),
            "timestamp without time zone": T.TimestampNTZType(),
            "timestamp with time zone": T.TimestampType(), "timestamptz": T.TimestampType(),
        }  # fmt: skip
        if base in simple:
            return simple[base], _identity
        if base in ("text", "character varying", "varchar", "character", "char", "bpchar",
                    "name", "citext"):  # fmt: skip
            return T.StringType(), _text
        if base == "bytea":
            return T.BinaryType(), _binary
        if base in ("numeric", "decimal"):
            kind, args = _decimal_or_text(precision, scale)
            if kind == "decimal":
                return T.DecimalType(*args), _identity
        return T.StringType(), _text

    if dialect == "sqlserver":
        simple = {
            "tinyint": T.ShortType(), "smallint": T.ShortType(), "int": T.IntegerType(),
            "bigint": T.LongType(), "bit": T.BooleanType(), "real": T.FloatType(),
            "float": T.DoubleType(), "date": T.DateType(),
            "datetime": T.TimestampNTZType(), "datetime2": T.TimestampNTZType(),
            "smalldatetime": T.TimestampNTZType(), "datetimeoffset": T.TimestampType(),
            "money": T.DecimalType(19, 4), "smallmoney": T.DecimalType(10, 4),
        }  # fmt: skip
        if base in simple:
            return simple[base], _identity
        if base in ("binary", "varbinary", "image", "rowversion", "timestamp"):
            return T.BinaryType(), _binary
        if base in ("decimal", "numeric"):
            return T.DecimalType(precision or 18, scale or 0), _identity
        if base == "uniqueidentifier":
            return T.StringType(), _upper_uuid
        return T.StringType(), _text

    raise ValueError(f"unknown dialect {dialect!r}")


@dataclass(frozen=True)
class RowLayout:
    """How a page's rows map to the output schema.

    Rows are ``(shard_id, ulid, *keys)``, followed with a payload by
    ``(row_exists, *payload_columns)``.
    """

    dialect: str
    keys: tuple[Column, ...]
    payload: tuple[Column, ...] | None

    def spark_schema(self) -> Any:
        from pyspark.sql import types as T

        fields = [
            T.StructField("shard_id", T.IntegerType(), False),
            T.StructField("ulid", T.BinaryType(), False),
        ]
        for column in self.keys:
            fields.append(
                T.StructField(column.name, spark_type_of(self.dialect, column.db_type)[0], False)
            )
        if self.payload is not None:
            children = [
                T.StructField(c.name, spark_type_of(self.dialect, c.db_type)[0], True)
                for c in self.payload
            ]
            fields.append(T.StructField("payload", T.StructType(children), True))
        return T.StructType(fields)

    def arrow_schema(self) -> Any:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.spark_schema(), timestamp_utc=True)

    def converters(self) -> list[Convert]:
        return [spark_type_of(self.dialect, c.db_type)[1] for c in self.keys]

    def payload_converters(self) -> list[Convert]:
        return [spark_type_of(self.dialect, c.db_type)[1] for c in self.payload or ()]


def _array(values: Sequence[Any], convert: Convert, arrow_type: Any, column: Column) -> Any:
    """One column of driver values as an Arrow array, each value converted.

    PostgreSQL's numeric(p,s) holds NaN, which a Spark decimal cannot: such a value fails
    the read, naming the column and the fix, rather than landing as something else."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    if convert is not _identity:
        values = [convert(v) for v in values]
    try:
        return pa.array(values, type=arrow_type)
    except pa.ArrowInvalid:
        bad = next((v for v in values if isinstance(v, Decimal) and not v.is_finite()), None)
        if bad is None:
            raise
        raise ChangefeedSourceError(
            f"the column {column.name} ({column.db_type}) holds {bad}, which the Spark "
            "decimal it is read as cannot hold (a Spark decimal has no NaN or infinity): "
            f"update the row, refuse the value with a check (check ({column.name} <> "
            "'NaN')), or declare the column numeric without precision (read as a string)"
        ) from None


class BatchBuilder:
    """Turns pages of driver rows into Arrow record batches of the layout's schema."""

    def __init__(self, layout: RowLayout) -> None:
        self.layout = layout
        self.schema = layout.arrow_schema()
        self._key_convert = layout.converters()
        self._payload_convert = layout.payload_converters()

    def build(self, rows: Sequence[Sequence[Any]]) -> Any:
        """One record batch from rows shaped as :class:`RowLayout` describes."""
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

        nkeys = len(self.layout.keys)
        columns: list[list[Any]] = (
            [list(c) for c in zip(*rows, strict=True)]
            if rows
            else [
                []
                for _ in range(
                    2
                    + nkeys
                    + (1 + len(self._payload_convert) if self.layout.payload is not None else 0)
                )
            ]
        )
        fields = list(self.schema)
        arrays = [
            pa.array(columns[0], type=fields[0].type),
            pa.array([_binary(u) for u in columns[1]], type=fields[1].type),
        ]
        exists = columns[2 + nkeys] if self.layout.payload is not None else None
        return self._finish(arrays, columns[2 : 2 + nkeys], exists, columns[3 + nkeys :])

    def snapshot_arrays(self, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """The key columns, then the payload columns, of source rows as Arrow arrays of
        the layout's types (each value converted as every read of the feed converts it)."""
        fields = list(self.schema)
        nkeys = len(self.layout.keys)
        types = [fields[2 + i].type for i in range(nkeys)]
        if self.layout.payload is not None:
            types += [f.type for f in fields[-1].type]
        converters = [*self._key_convert, *self._payload_convert]
        named = [*self.layout.keys, *(self.layout.payload or ())]
        columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * len(types)
        return [
            _array(v, c, t, n) for v, c, t, n in zip(columns, converters, types, named, strict=True)
        ]

    def snapshot_batch(self, shard: int, ulids: Any, arrays: Sequence[Any]) -> Any:
        """One record batch of snapshot events from ``arrays``
        (:meth:`snapshot_arrays`, or a direct Arrow read of the same columns)."""
        import numpy as np
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

        nkeys = len(self.layout.keys)
        fields = list(self.schema)
        out = [pa.array(np.full(len(ulids), shard, dtype=np.int32), type=fields[0].type), ulids]
        out += arrays[:nkeys]
        if self.layout.payload is not None:
            struct_type = fields[-1].type
            out.append(pa.StructArray.from_arrays(list(arrays[nkeys:]), fields=list(struct_type)))
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    def _finish(
        self,
        arrays: list[Any],
        key_columns: Sequence[list[Any]],
        exists: Sequence[Any] | None,
        payload_columns: Sequence[list[Any]],
    ) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

        fields = list(self.schema)
        for i, convert in enumerate(self._key_convert):
            arrays.append(_array(key_columns[i], convert, fields[2 + i].type, self.layout.keys[i]))
        if self.layout.payload is not None and exists is not None:
            struct_type = fields[-1].type
            children = [
                _array(payload_columns[j], convert, struct_type.field(j).type, column)
                for j, (convert, column) in enumerate(
                    zip(self._payload_convert, self.layout.payload, strict=True)
                )
            ]
            mask = pa.array([not bool(e) for e in exists], type=pa.bool_())
            arrays.append(pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
