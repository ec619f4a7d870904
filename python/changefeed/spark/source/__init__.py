"""``format("changefeed")``: read PostgreSQL and SQL Server change feeds in Spark.

>>> from changefeed.spark.source import register              # doctest: +SKIP
>>> register(spark)                                                # doctest: +SKIP
>>> events = (spark.read.format("changefeed")                      # doctest: +SKIP
...           .option("connection", "postgresql://app@db/shop")
...           .option("feed", "shop.orders").load())

Batch reads fix each shard's safe point when Spark plans the query; streaming reads use
per-shard ULID cursors as offsets. Options, offsets, payloads and the exactly-once
argument: docs/spark-source.md.
"""

from __future__ import annotations

from typing import Any

from changefeed.dialects import Backend, Connection, SourceFeed, parse_connection
from changefeed.dialects.rows import BatchBuilder, RowLayout, base_type
from changefeed.errors import ChangefeedSourceError
from changefeed.spark.source._dialects import open_backend
from changefeed.spark.source._options import OPTIONS, FeedOptions, parse_options
from changefeed.spark.source._positions import decode_offset, encode_offset, to_hex
from changefeed.spark.source._read_range import read_range
from changefeed.spark.source._retention import LANDING_FIX, check_not_behind
from changefeed.spark.source._source import (
    FORMAT_NAME,
    FeedBatchReader,
    FeedDataSource,
    FeedPartition,
    FeedStreamReader,
)

__all__ = [
    "FORMAT_NAME",
    "LANDING_FIX",
    "OPTIONS",
    "Backend",
    "BatchBuilder",
    "ChangefeedSourceError",
    "Connection",
    "FeedBatchReader",
    "FeedDataSource",
    "FeedOptions",
    "FeedPartition",
    "FeedStreamReader",
    "RowLayout",
    "SourceFeed",
    "base_type",
    "check_not_behind",
    "decode_offset",
    "encode_offset",
    "open_backend",
    "parse_connection",
    "parse_options",
    "read_range",
    "register",
    "to_hex",
]


def register(spark: Any) -> str:
    """Register ``format("changefeed")`` with ``spark``; returns the format name.

    Registering again is harmless. Executors need this package installed (they run the
    partitions in Python workers).
    """
    try:
        spark.dataSource.register(FeedDataSource)
    except Exception as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc) or not hasattr(spark, "_jsparkSession"):
            raise
        # Spark looks the name up in the thread's *active* session, not in ``spark``: a
        # ``newSession()`` of a session that registered the format is refused, though it
        # lacks it. Registering while ``spark`` is the active session puts it there.
        _register_as_active(spark)
    return FORMAT_NAME


def _register_as_active(spark: Any) -> None:
    sessions = spark._jvm.org.apache.spark.sql.SparkSession
    previous = sessions.getActiveSession()
    sessions.setActiveSession(spark._jsparkSession)
    try:
        spark.dataSource.register(FeedDataSource)
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()
