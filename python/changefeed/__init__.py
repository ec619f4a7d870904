"""changefeed: race-safe change feeds for SQL Server and PostgreSQL, consumed by Spark.

The database clients live in :mod:`changefeed.client`, the ULID kernels in
:mod:`changefeed.ulid` (numpy only), everything that runs on Spark under
:mod:`changefeed.spark`, and the ``changefeed`` command in :mod:`changefeed.cli`.
"""

__version__ = "0.1.0"
