"""changefeed on Spark. Nothing is imported here; each piece is its own package:

* :mod:`changefeed.spark.udfs`: the ULID functions as Arrow UDFs (``register(spark)`` for
  SQL, and column functions such as ``ulid_to_string``); docs/spark-udfs.md.
* :mod:`changefeed.spark.source`: ``format("changefeed")``, the data source that reads
  PostgreSQL and SQL Server feeds, batch or streaming; docs/spark-source.md.
* :mod:`changefeed.spark.feedtable`: the Spark feed table format (protocol section 11):
  ``write_batch``, ``feed_heads``, ``next_batch``; docs/spark.md.
* :mod:`changefeed.spark.landing`: ``land()``, one batch of a database feed into a feed
  table per run (what ``changefeed land`` runs).

:func:`is_connect` tells a Spark Connect session (no JVM handle, no ``SparkContext``) from
a classic one, for the few steps that differ.
"""

from typing import Any


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``,
    ``SPARK_REMOTE``): it has no ``sparkContext`` and no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
