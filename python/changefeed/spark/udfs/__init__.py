"""Vectorized Spark UDFs for ULIDs stored as ``binary(16)`` (Spark ``BinaryType``).

Two ways in, same functions:

* SQL: ``register(spark)`` registers ``ulid_to_string``, ``ulid_from_string``,
  ``ulid_timestamp``, ``ulid_timestamp_ms``, ``ulid_is_valid``, ``ulid_from_parts``,
  ``ulid_to_uuid`` and ``ulid_from_uuid`` for ``spark.sql``.
* Python: the column functions of the same names in this module.

>>> from changefeed.spark.udfs import register, ulid_to_string          # doctest: +SKIP
>>> register(spark)                                                # doctest: +SKIP
>>> spark.sql("select ulid_to_string(id) from events")             # doctest: +SKIP
>>> events.select(ulid_to_string("id"))                            # doctest: +SKIP

Semantics: NULL in gives NULL out. An invalid value (binary not 16 bytes, text that is
not a ULID / UUID, ``ulid_high`` not 8 bytes) gives NULL; with ``strict=True`` the query
fails with an error naming the value and why, e.g. ``ulid_from_string(strict=True):
'01ARZ3NDEKTSV4RRFFQ69G5FAU' is not a valid ULID: invalid character 'U' at position 25``.
Functions that take a ULID accept its 16 bytes or its 26-character text.

They are Arrow UDFs (``pyspark.sql.functions.arrow_udf``, Spark 4.1+): measured on
identical data they beat pandas UDFs, which turn every binary value into a Python
``bytes`` object; see docs/spark-udfs.md. On PySpark 3.5 and 4.0, which lack
``arrow_udf``, they are pandas UDFs with the same results. Executors need this package
installed.
"""

from __future__ import annotations

from typing import Any

from changefeed.spark.udfs._batch import StrictULIDError
from changefeed.spark.udfs._functions import FUNCTIONS, make_udf

FUNCTION_NAMES: tuple[str, ...] = tuple(FUNCTIONS)

__all__ = [
    "FUNCTION_NAMES",
    "StrictULIDError",
    "make_udf",
    "register",
    "ulid_from_parts",
    "ulid_from_string",
    "ulid_from_uuid",
    "ulid_is_valid",
    "ulid_timestamp",
    "ulid_timestamp_ms",
    "ulid_to_string",
    "ulid_to_uuid",
]


def register(spark: Any, strict: bool = False) -> tuple[str, ...]:
    """Register the ULID functions as temporary SQL functions of ``spark``.

    Returns the registered names. Registering again (e.g. with another ``strict``)
    replaces the earlier definitions in that session.

    >>> register(spark)                                                # doctest: +SKIP
    ('ulid_to_string', 'ulid_from_string', 'ulid_timestamp', ...)
    >>> spark.sql("select ulid_timestamp_ms(ulid_from_string('01ARZ3NDEKTSV4RRFFQ69G5FAV'))")
    ...                                                                # doctest: +SKIP
    """
    for name in FUNCTION_NAMES:
        spark.udf.register(name, make_udf(name, strict))
    return FUNCTION_NAMES


def ulid_to_string(column: Any, *, strict: bool = False) -> Any:
    """ULID (binary(16) or text) to its canonical upper-case 26-character string.

    >>> df.select(ulid_to_string("id"))                                # doctest: +SKIP
    """
    return make_udf("ulid_to_string", strict)(column)


def ulid_from_string(column: Any, *, strict: bool = False) -> Any:
    """26-character ULID string (either case) to its 16 bytes; NULL if not a ULID.

    >>> df.where(col("id") == ulid_from_string(lit("01ARZ3NDEKTSV4RRFFQ69G5FAV")))
    ...                                                                # doctest: +SKIP
    """
    return make_udf("ulid_from_string", strict)(column)


def ulid_timestamp(column: Any, *, strict: bool = False) -> Any:
    """ULID to its creation time as a Spark TIMESTAMP (millisecond precision).

    >>> df.select(ulid_timestamp("id").alias("created_at"))            # doctest: +SKIP
    """
    return make_udf("ulid_timestamp", strict)(column)


def ulid_timestamp_ms(column: Any, *, strict: bool = False) -> Any:
    """ULID to its creation time in milliseconds since the Unix epoch (bigint).

    >>> df.select(ulid_timestamp_ms("id"))                             # doctest: +SKIP
    """
    return make_udf("ulid_timestamp_ms", strict)(column)


def ulid_is_valid(column: Any) -> Any:
    """True for a 16-byte binary or valid ULID text, false otherwise, NULL for NULL.

    >>> df.where(~ulid_is_valid("id"))                                 # doctest: +SKIP
    """
    return make_udf("ulid_is_valid")(column)


def ulid_from_parts(high: Any, low: Any, *, strict: bool = False) -> Any:
    """mssql-changefeed's ``ulid_high`` binary(8) and ``ulid_low`` bigint to binary(16).

    >>> df.select(ulid_from_parts("ulid_high", "ulid_low").alias("id"))  # doctest: +SKIP
    """
    return make_udf("ulid_from_parts", strict)(high, low)


def ulid_to_uuid(column: Any, *, strict: bool = False) -> Any:
    """ULID to the lower-case 8-4-4-4-12 UUID spelling of the same 16 bytes.

    >>> df.select(ulid_to_uuid("id"))                                  # doctest: +SKIP
    """
    return make_udf("ulid_to_uuid", strict)(column)


def ulid_from_uuid(column: Any, *, strict: bool = False) -> Any:
    """UUID text (either case) to the 16 bytes; NULL if not 8-4-4-4-12 hex.

    >>> df.select(ulid_from_uuid("uuid_text"))                         # doctest: +SKIP
    """
    return make_udf("ulid_from_uuid", strict)(column)
