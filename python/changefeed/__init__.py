"""changefeed: race-safe change feeds for SQL Server and PostgreSQL, consumed by Spark.

The ULID kernels live in :mod:`changefeed.ulid` (numpy only); the Spark UDFs in
:mod:`changefeed.spark`.
"""

__version__ = "0.1.0"
