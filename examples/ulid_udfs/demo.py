"""A small tour of the ULID UDFs on a local Spark session (`make demo` runs the end-to-end
shop pipeline; this is the UDF-only example).

Run: .venv/bin/python examples/ulid_udfs/demo.py
"""

from __future__ import annotations

import sys
import time

import numpy as np

from changefeed import ulid
from changefeed.local.spark import local_spark_session
from changefeed.spark.udfs import register


def main() -> int:
    print("starting a local Spark session ...", flush=True)
    spark = local_spark_session(app_name="changefeed-demo")
    names = register(spark)
    print(f"registered SQL functions: {', '.join(names)}")

    # One batch of monotonic ULIDs, as a feed's writer would allocate them.
    raw = ulid.generate(5, timestamp_ms=int(time.time() * 1000))
    rows = [(bytes(r),) for r in raw] + [(b"\x00" * 15,), (None,)]
    spark.createDataFrame(rows, "id binary").createOrReplaceTempView("events")

    print("\nULIDs as stored (binary(16)) read as text, timestamp and UUID;")
    print("a 15-byte value and a NULL show the NULL-on-invalid default:")
    spark.sql(
        """
        select ulid_to_string(id)  as ulid,
               ulid_timestamp(id)  as ts,
               ulid_to_uuid(id)    as uuid,
               ulid_is_valid(id)   as valid
        from events
        """
    ).show(truncate=False)

    print("decoding text (lower case accepted; 'U' is not in the alphabet):")
    text = ulid.encode_one(bytes(raw[0]))
    spark.sql(
        f"""
        select s as input, hex(ulid_from_string(s)) as bytes_hex
        from values ('{text}'), ('{text.lower()}'), ('{text[:-1]}U'), ('short') as t(s)
        """
    ).show(truncate=False)

    ordered = spark.sql("select id from events where ulid_is_valid(id) order by id").collect()
    assert [bytes(r.id) for r in ordered] == sorted(bytes(r) for r in raw)
    assert np.array_equal(ulid.decode(ulid.encode(raw)), raw)
    print("checks passed: byte order equals allocation order; encode/decode round-trips")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
