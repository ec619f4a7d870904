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

``retain`` removes a feed's oldest batches by a policy (protocol 11.7), never a shard's
head nor past the cursor of a consumer it is given.
"""

from changefeed.errors import FellBehindRetention
from changefeed.spark.feedtable._catalog import CatalogUnavailable, table_exists
from changefeed.spark.feedtable._feed import (
    BATCH_COLUMN,
    FORMATS,
    RESERVED_COLUMNS,
    SHARD_COLUMN,
    ULID_COLUMN,
    FeedOrderError,
    clear_orphan_location,
    committed_batches,
    feed_heads,
    newest_heads,
    next_batch,
    table_format,
    write_batch,
)
from changefeed.spark.feedtable._retention import (
    RetentionResult,
    check_cursor,
    consumed_batch,
    feed_horizon,
    retain,
)

__all__ = [
    "BATCH_COLUMN",
    "FORMATS",
    "RESERVED_COLUMNS",
    "SHARD_COLUMN",
    "ULID_COLUMN",
    "CatalogUnavailable",
    "FeedOrderError",
    "FellBehindRetention",
    "RetentionResult",
    "check_cursor",
    "clear_orphan_location",
    "committed_batches",
    "consumed_batch",
    "feed_heads",
    "feed_horizon",
    "newest_heads",
    "next_batch",
    "retain",
    "table_exists",
    "table_format",
    "write_batch",
]
