"""changefeed on Spark. Nothing is imported here; each piece is its own package:

* :mod:`changefeed.spark.udfs`: the ULID functions as Arrow UDFs (``register(spark)`` for
  SQL, and column functions such as ``ulid_to_string``); docs/spark-udfs.md.
* :mod:`changefeed.spark.source`: ``format("changefeed")``, the data source that reads
  PostgreSQL and SQL Server feeds, batch or streaming; docs/spark-source.md.
* :mod:`changefeed.spark.feedtable`: the Spark feed table format (protocol section 11):
  ``write_batch``, ``feed_heads``, ``next_batch``; docs/spark.md.
* :mod:`changefeed.spark.landing`: ``land()``, one batch of a database feed into a feed
  table per run (what ``changefeed land`` runs).
"""
