"""Wrap the Arrow batch functions of :mod:`changefeed.spark.udfs._batch` as Spark UDFs.

PySpark 4.1+ gets Arrow UDFs: Spark hands the body Arrow arrays. PySpark 3.5 and 4.0 have
no ``arrow_udf``, so they get pandas UDFs around the same body: each batch goes from
pandas to Arrow, through the body, and back (the same results, at the cost of a Python
object per value; docs/spark-udfs.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from changefeed.spark.udfs import _batch
from changefeed.spark.udfs._workers import check_local_workers


@dataclass(frozen=True)
class Function:
    """One SQL function: its batch body, Spark return type and number of arguments."""

    name: str
    body: Callable[..., pa.Array]
    return_type: str
    arity: int
    doc: str


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("ulid_to_string", _batch.to_string, "string", 1,
                 "ULID (binary(16) or text) -> canonical 26-character string"),
        Function("ulid_from_string", _batch.from_string, "binary", 1,
                 "26-character ULID string (either case) -> binary(16)"),
        Function("ulid_timestamp", _batch.timestamp, "timestamp", 1,
                 "ULID -> creation timestamp (millisecond precision)"),
        Function("ulid_timestamp_ms", _batch.timestamp_ms, "bigint", 1,
                 "ULID -> creation time in milliseconds since the Unix epoch"),
        Function("ulid_is_valid", _batch.is_valid, "boolean", 1,
                 "binary of 16 bytes / valid ULID text -> true; NULL -> NULL"),
        Function("ulid_from_parts", _batch.from_parts, "binary", 2,
                 "ulid_high binary(8), ulid_low bigint -> binary(16)"),
        Function("ulid_to_uuid", _batch.to_uuid, "string", 1,
                 "ULID -> lower-case 8-4-4-4-12 UUID text of the same 16 bytes"),
        Function("ulid_from_uuid", _batch.from_uuid, "binary", 1,
                 "UUID text (either case) -> binary(16)"),
    )
}  # fmt: skip


def _scalar_body(function: Function, strict: bool) -> Callable[..., Any]:
    # pyspark picks the UDF flavour from these type hints, so they must stay pa.Array.
    body = function.body
    if function.arity == 1:

        def one(values: pa.Array) -> pa.Array:
            return body(values, strict)

        return one

    def two(first: pa.Array, second: pa.Array) -> pa.Array:
        return body(first, second, strict)

    return two


def _iterator_body(function: Function, strict: bool) -> Callable[..., Any]:
    body = function.body
    if function.arity == 1:

        def one(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            for values in batches:
                yield body(values, strict)

        return one

    def two(batches: Iterator[tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
        for first, second in batches:
            yield body(first, second, strict)

    return two


def _pandas_body(function: Function, strict: bool) -> Callable[..., Any]:
    import pandas as pd

    body = function.body
    timestamp = function.return_type == "timestamp"

    def arrow(values: pd.Series) -> pa.Array:
        # Binary columns arrive as bytes objects, strings as str: Arrow infers which.
        # A batch of only NULLs infers the null type, which the bodies do not take.
        array = pa.Array.from_pandas(values)
        return array.cast(pa.binary()) if pa.types.is_null(array.type) else array

    def series(result: pa.Array, index: pd.Index) -> pd.Series:
        if timestamp:
            # A naive pandas timestamp would be read back in the session time zone.
            out = pd.Series(result.to_pandas(), index=index)
            return out.dt.tz_localize("UTC") if out.dt.tz is None else out
        # Nullable dtypes keep bigint and boolean NULLs exact (no float NaN).
        mapper = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}.get
        return pd.Series(result.to_pandas(types_mapper=mapper), index=index)

    if function.arity == 1:

        def one(values: pd.Series) -> pd.Series:
            return series(body(arrow(values), strict), values.index)

        one.__annotations__ = {"values": pd.Series, "return": pd.Series}
        return one

    def two(first: pd.Series, second: pd.Series) -> pd.Series:
        return series(body(arrow(first), arrow(second), strict), first.index)

    # pyspark reads the UDF flavour from these hints; real types, because the module's
    # postponed annotations name ``pd``, which is imported here only.
    two.__annotations__ = {"first": pd.Series, "second": pd.Series, "return": pd.Series}
    return two


def _pandas_udf(function: Function, strict: bool) -> Any:
    from pyspark.sql.pandas.functions import pandas_udf

    body = _pandas_body(function, strict)
    body.__name__ = body.__qualname__ = function.name
    body.__doc__ = function.doc
    factory: Any = pandas_udf
    return factory(body, function.return_type)


def make_udf(name: str, strict: bool = False, iterator: bool = False) -> Any:
    """A new UDF for SQL function ``name``: an Arrow UDF on PySpark 4.1+, a pandas UDF
    with the same results on PySpark 3.5 and 4.0.

    Not cached on purpose: a UDF object binds to the SparkContext that first evaluates
    it, and a process may stop one session and start another.

    ``iterator=True`` builds the ``Iterator[pa.Array] -> Iterator[pa.Array]`` form
    instead of the default ``pa.Array -> pa.Array`` one. Both run the same batch
    body; the default is the one ``register`` uses, because Spark can evaluate several
    scalar Arrow UDFs of one ``select`` in a single pass over the data, while each
    iterator UDF gets its own pass. On PySpark 3.5 and 4.0 ``iterator`` is refused.
    """
    function = FUNCTIONS.get(name)
    if function is None:
        raise ValueError(f"unknown ULID function {name!r}; expected one of {', '.join(FUNCTIONS)}")
    try:
        from pyspark.sql.pandas.functions import arrow_udf
    except ImportError:  # PySpark 3.5 and 4.0
        if iterator:
            raise ValueError(
                "iterator=True needs PySpark 4.1 or newer (Arrow UDFs); on "
                "older PySpark use the default scalar form"
            ) from None
        check_local_workers()
        return _pandas_udf(function, strict)
    check_local_workers()
    body = (_iterator_body if iterator else _scalar_body)(function, strict)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = function.doc
    # pyspark's stubs only type the deprecated explicit-functionType form; the flavour
    # comes from the type hints of ``body`` instead.
    factory: Any = arrow_udf
    return factory(body, function.return_type)
