"""The ULID UDFs over a fixed set of inputs, on whichever PySpark runs this.

``results(spark)`` evaluates every function of :mod:`changefeed.spark.udfs` (through SQL
after ``register`` and through the column functions) and returns the values in a
JSON-able form, so that the results of two PySpark versions compare exactly.

``python tests/support/udf_compat.py`` starts a plain local Spark (no lakehouse jars: they
are built for the pinned Spark) with the running interpreter as its Python workers and
prints ``results`` as JSON; tests/test_udfs_older_pyspark.py runs it with the PySpark 3.5
environment that ``make compat-venv`` builds.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: A known ULID (python-ulid's example): its bytes, text, UUID and time.
KNOWN_HEX = "01563e3ab5d3d6764c61efb99302bd5b"
KNOWN_TEXT = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
KNOWN_MS = 1469922850259

#: (binary argument as hex or None, text argument or None), one row per case.
CASES: list[tuple[str | None, str | None]] = [
    (KNOWN_HEX, KNOWN_TEXT),
    ("00" * 16, "00000000000000000000000000"),
    ("ff" * 16, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
    (None, KNOWN_TEXT.lower()),
    ("0102", "01ARZ3NDEKTSV4RRFFQ69G5FAU"),
    (KNOWN_HEX, None),
    (None, "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
]
UUIDS = ["01563e3a-b5d3-d676-4c61-efb99302bd5b", "01563E3A-B5D3-D676-4C61-EFB99302BD5B",
         "not-a-uuid", None]  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def _rows(frame: Any) -> list[list[Any]]:
    return [[_plain(v) for v in row] for row in frame.collect()]


def results(spark: Any) -> dict[str, Any]:
    """Every function's output over :data:`CASES` and :data:`UUIDS`, keyed by a label."""
    from pyspark.sql import functions as F

    from changefeed.spark import udfs

    udfs.register(spark)
    cases = spark.createDataFrame(
        [(i, bytes.fromhex(b) if b else None, t) for i, (b, t) in enumerate(CASES)],
        "i int, b binary, t string",
    )
    cases.createOrReplaceTempView("compat_cases")
    uuids = spark.createDataFrame(list(enumerate(UUIDS)), "i int, u string")
    uuids.createOrReplaceTempView("compat_uuids")
    out: dict[str, Any] = {}
    out["sql"] = _rows(spark.sql(
        "select i, ulid_to_string(b), ulid_to_string(t), ulid_from_string(t), "
        "cast(ulid_timestamp(b) as string), cast(ulid_timestamp(t) as string), "
        "ulid_timestamp_ms(b), ulid_timestamp_ms(t), "
        "ulid_is_valid(b), ulid_is_valid(t), ulid_to_uuid(b), "
        "ulid_from_parts(substring(b, 1, 8), 42) from compat_cases order by i"
    ))  # fmt: skip
    out["uuid"] = _rows(spark.sql(
        "select i, ulid_from_uuid(u), ulid_to_string(ulid_from_uuid(u)) from compat_uuids "
        "order by i"
    ))  # fmt: skip
    out["columns"] = _rows(cases.orderBy("i").select(
        udfs.ulid_to_string("b"), udfs.ulid_from_string("t"), udfs.ulid_timestamp_ms("t"),
        udfs.ulid_is_valid("b"), udfs.ulid_to_uuid("t"),
        udfs.ulid_from_parts(F.substring("b", 1, 8), F.lit(7).cast("bigint")),
    ))  # fmt: skip
    # NULL-only batches: Arrow infers no type for them.
    out["nulls"] = _rows(spark.sql(
        "select ulid_to_string(cast(null as binary)), ulid_timestamp_ms(cast(null as string)), "
        "ulid_is_valid(cast(null as binary))"
    ))  # fmt: skip
    udfs.register(spark, strict=True)
    try:
        spark.sql("select ulid_from_string(t) from compat_cases where i = 4").collect()
    except Exception as exc:  # the executor's error reaches the driver as text
        text = str(exc)
        out["strict_error"] = next(
            (line.strip() for line in text.splitlines() if "is not a valid ULID" in line), text
        )
    else:
        out["strict_error"] = None
    return out


def main() -> None:
    sys.path.insert(0, str(REPO / "python"))
    # The Python workers import changefeed too: from this checkout, not an installed copy.
    os.environ["PYTHONPATH"] = str(REPO / "python")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("changefeed-udf-compat")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(json.dumps({"pyspark": pyspark.__version__, "results": results(spark)}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
