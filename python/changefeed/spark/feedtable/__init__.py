"""Spark feeds (docs/protocol.md section 11) from PySpark.

A Spark feed is a catalog table ``(shard_id int, ulid binary, <key/payload columns>,
changefeed_batch bigint)`` partitioned by ``changefeed_batch``. Each write is one batch,
committed by the registration of its one new partition; heads, safe points and the
next batch number are derived from the committed partitions (their list in the
metastore, and the newest of them for heads). dbt models publish and consume
feeds with the ``changefeed.publish_feed`` / ``feed_*`` macros; this module is the same
commit rule for Python writers such as a landing job:

>>> from changefeed.spark.feedtable import write_batch               # doctest: +SKIP
>>> write_batch(spark, "landing.shop_orders", events_df)        # doctest: +SKIP
3

:class:`FeedTable` is one feed table by name (``FeedTable.for_name(spark, name)``, as
Delta's ``DeltaTable.forName``): its existence, format, committed batches, heads and next
batch; the functions here and the landing ask through it.

:meth:`FeedTable.schema_versions` tells which payload columns each batch has
(:class:`SchemaVersion`), as the landing records it when the source's columns change.

``retain`` removes a feed's oldest batches by a policy (protocol 11.7), never a shard's
head nor past the cursor of a consumer it is given.
"""

from changefeed.errors import FellBehindRetention
from changefeed.spark.feedtable._catalog import CatalogUnavailable, quote, sql_string, table_exists
from changefeed.spark.feedtable._feed import (
    RESERVED_COLUMNS,
    FeedOrderError,
    clear_orphan_location,
    committed_batches,
    feed_heads,
    newest_heads,
    next_batch,
    table_format,
    write_batch,
)
from changefeed.spark.feedtable._operation import (
    DELETE,
    LANDED_OPERATIONS,
    OPERATION_COLUMN,
    SNAPSHOT,
    UPSERT,
    with_operation,
    with_operation_arrow,
)
from changefeed.spark.feedtable._retention import (
    RetentionResult,
    check_cursor,
    consumed_batch,
    feed_horizon,
    retain,
)
from changefeed.spark.feedtable._table import (
    BATCH_COLUMN,
    FORMATS,
    SESSION_CATALOG,
    SHARD_COLUMN,
    ULID_COLUMN,
    FeedTable,
    FeedTableNameError,
    TableName,
)
from changefeed.spark.feedtable._versions import (
    NUMBERS_PROPERTY,
    VERSION_PREFIX,
    VERSION_PROPERTY,
    SchemaVersion,
    dropped_columns,
    numbers_properties,
    properties_sql,
    schema_versions,
    source_numbers,
    table_properties,
)

__all__ = [
    "BATCH_COLUMN",
    "DELETE",
    "FORMATS",
    "LANDED_OPERATIONS",
    "NUMBERS_PROPERTY",
    "OPERATION_COLUMN",
    "RESERVED_COLUMNS",
    "SESSION_CATALOG",
    "SHARD_COLUMN",
    "SNAPSHOT",
    "ULID_COLUMN",
    "UPSERT",
    "VERSION_PREFIX",
    "VERSION_PROPERTY",
    "CatalogUnavailable",
    "FeedOrderError",
    "FeedTable",
    "FeedTableNameError",
    "FellBehindRetention",
    "RetentionResult",
    "SchemaVersion",
    "TableName",
    "check_cursor",
    "clear_orphan_location",
    "committed_batches",
    "consumed_batch",
    "dropped_columns",
    "feed_heads",
    "feed_horizon",
    "newest_heads",
    "next_batch",
    "numbers_properties",
    "properties_sql",
    "quote",
    "retain",
    "schema_versions",
    "source_numbers",
    "sql_string",
    "table_exists",
    "table_format",
    "table_properties",
    "with_operation",
    "with_operation_arrow",
    "write_batch",
]
