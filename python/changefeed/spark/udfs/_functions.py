"""Wrap the Arrow batch functions of :mod:`changefeed.spark.udfs._batch` as Spark Arrow UDFs."""

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


def make_udf(name: str, strict: bool = False, iterator: bool = False) -> Any:
    """A new Arrow UDF for SQL function ``name``.

    Not cached on purpose: a UDF object binds to the SparkContext that first evaluates
    it, and a process may stop one session and start another.

    ``iterator=True`` builds the ``Iterator[pa.Array] -> Iterator[pa.Array]`` form
    instead of the default ``pa.Array -> pa.Array`` one. Both run the same batch
    body; the default is the one ``register`` uses, because Spark can evaluate several
    scalar Arrow UDFs of one ``select`` in a single pass over the data, while each
    iterator UDF gets its own pass.
    """
    try:
        from pyspark.sql.pandas.functions import arrow_udf
    except ImportError as exc:  # pragma: no cover - PySpark < 4.1
        import pyspark

        raise ImportError(
            "changefeed.spark.udfs needs PySpark 4.1 or newer (Arrow UDFs); "
            f"found {pyspark.__version__}"
        ) from exc

    function = FUNCTIONS.get(name)
    if function is None:
        raise ValueError(f"unknown ULID function {name!r}; expected one of {', '.join(FUNCTIONS)}")
    check_local_workers()
    body = (_iterator_body if iterator else _scalar_body)(function, strict)
    body.__name__ = body.__qualname__ = name
    body.__doc__ = function.doc
    # pyspark's stubs only type the deprecated explicit-functionType form; the flavour
    # comes from the type hints of ``body`` instead.
    factory: Any = arrow_udf
    return factory(body, function.return_type)
