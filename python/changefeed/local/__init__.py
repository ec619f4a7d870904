"""The local environment: the Spark session, its jars, the shared catalog and the
PostgreSQL servers that the CLI, the demo and the tests start on this machine.

* :mod:`changefeed.local.spark`: the embedded ``local[2]`` Spark session and the Java check;
* :mod:`changefeed.local.jars`: the Delta Lake, Iceberg, JDBC and S3A jars it loads, and
  the settings that enable them;
* :mod:`changefeed.local.catalog`: the shared catalog (``changefeed catalog init``), a Hive
  metastore in an embedded PostgreSQL that the CLI, the Spark source and dbt use at once;
* :mod:`changefeed.local.catalog_tables`: a feed table's heads on that catalog, read
  without Spark;
* :mod:`changefeed.local.embedded_postgres`: a throwaway PostgreSQL server (pgserver).

Nothing here is imported when the package is: each module is imported where it is used.
"""
