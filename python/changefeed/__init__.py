"""changefeed: race-safe change feeds for SQL Server and PostgreSQL, consumed by Spark.

The database clients live in :mod:`changefeed.client`, the ULID kernels in
:mod:`changefeed.ulid` (numpy only), everything that runs on Spark under
:mod:`changefeed.spark`, and the ``changefeed`` command in :mod:`changefeed.cli`. Every
exception the package raises derives from :class:`ChangefeedError` (:mod:`changefeed.errors`).
"""

from changefeed.errors import ChangefeedError

__version__ = "0.2.0"

__all__ = ["ChangefeedError", "__version__"]
