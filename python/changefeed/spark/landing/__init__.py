"""Land a PostgreSQL or SQL Server feed into a Spark table, incrementally.

>>> from changefeed.spark.landing import land                            # doctest: +SKIP
>>> result = land(spark, {"connection": "postgresql://app@db/shop",  # doctest: +SKIP
...                       "feed": "shop.orders", "payload": "true"},
...               "landing.orders_feed")
>>> result.batch, result.events                                    # doctest: +SKIP
(7, 1520)

Each run appends at most one batch, in the Spark feed format of docs/protocol.md
section 11, so dbt-spark consumers read a landed feed exactly like a published one:

1. the cursor of each shard is the table's committed ``max(ulid)`` for that shard (the
   table is the only record of progress), read from its newest batches backwards until
   every shard is found, and the batch number ``N`` is one more than the table's highest
   (its partition list);
2. the source's safe point of each shard is read once (outbox feeds: after moving the
   outbox), and ``format("changefeed")`` reads ``(cursor, safe point]``;
3. the rows are written as partition ``changefeed_batch=N`` with a dynamic
   ``insert overwrite``: the partition's registration is the commit. A run killed at any
   moment left nothing readers can see, and its re-run computes the same ``N`` and the
   same cursors, and replaces whatever the killed run left;
4. on PostgreSQL, the landed position of each shard is registered for retention
   (``save_cursor``, protocol 8.1) under the option ``consumer``, by default the table's
   name, so retention keeps every event the table does not hold yet and ``changefeed
   status`` shows the landing's lag. A shard whose cursor lies below what retention
   removed fails the run before anything is read ("fell behind retention").

A table has one writer at a time (protocol 11, F4): each landing connection holds the
table's writer lock in the source database, and a second landing of the table fails at
once naming the holder. The table records its feed (table properties ``changefeed.feed``
and ``changefeed.source``), and a landing of another feed into it is refused.

:class:`LandingService` lands many feeds from one Spark application, each with its own
:class:`Landing` (``resolve_targets`` names them by id or pattern such as ``shop.*``).

:func:`land_continuously` repeats the runs in one process until stopped, with
:class:`Landing` keeping the state of its own last commit between them (no table read
per run); at ``interval=1, poll=0.1`` events land within a few seconds of their commit
(docs/spark-source.md, "Continuous landing").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from changefeed.dialects.snapshot_types import SnapshotRequest
from changefeed.service_state import FeedState
from changefeed.spark.landing._continuous import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    MIN_POLL,
    check_timing,
    land_continuously,
)
from changefeed.spark.landing._landing import (
    Landing,
    LandingResult,
    StageCallback,
    check_source,
)
from changefeed.spark.landing._service import (
    DEFAULT_WORKERS,
    FeedTarget,
    LandingService,
    resolve_targets,
    table_name,
)
from changefeed.spark.landing._snapshot import ProgressCallback, SnapshotProgress, source_frame
from changefeed.spark.landing._snapshot import cancel as cancel_snapshot
from changefeed.spark.landing._snapshot import request as request_snapshot
from changefeed.spark.landing._snapshot_plan import CHUNK_ROWS
from changefeed.spark.source import ChangefeedSourceError

__all__ = [
    "DEFAULT_WORKERS",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "MIN_POLL",
    "ChangefeedSourceError",
    "FeedState",
    "FeedTarget",
    "Landing",
    "LandingResult",
    "LandingService",
    "SnapshotProgress",
    "SnapshotRequest",
    "cancel_snapshot",
    "check_source",
    "check_timing",
    "land",
    "land_continuously",
    "request_snapshot",
    "resolve_targets",
    "source_frame",
    "table_name",
]


def land(
    spark: Any,
    source_options: Mapping[str, str],
    target_table: str,
    *,
    on_stage: StageCallback | None = None,
    table_format: str | None = None,
    on_progress: ProgressCallback | None = None,
    snapshot_chunk_rows: int | None = None,
) -> LandingResult:
    """Land the feed's new events into ``target_table`` as one batch; see the module doc.

    ``source_options`` are the options of ``format("changefeed")`` (``connection``,
    ``feed`` and optionally ``shards``, ``pageSize``, ``payload``, ``startingPosition``,
    ``moveOutbox``, ``user``, ``password``, ``changefeedSchema``, ``consumer``).
    ``startingPosition`` applies to shards the table has no rows of yet; it must be
    ``beginning``, a ULID or a timestamp (not ``now``: a moving start cannot be re-derived
    from the table). The table is created on the first run; an existing table must have
    the feed's columns. ``consumer`` names the landing for retention (see the module doc).

    ``target_table`` is ``database.table`` (or ``table``) in the session catalog, or
    ``catalog.database.table`` in an Iceberg catalog (e.g. ``iceberg.landing.orders``).
    ``table_format`` is the format of a table the run creates: ``parquet`` (the default in
    the session catalog), ``delta`` (needs Delta's catalog as the session catalog) or
    ``iceberg`` (the default, and the only one, in another catalog). An existing table
    keeps its format; a ``table_format`` that disagrees with it is refused.

    Pending snapshot requests of the feed (:func:`request_snapshot`, protocol section 12)
    run first, to their end, in chunks of ``snapshot_chunk_rows`` source rows (default
    1,000,000; one Spark task each); ``on_progress`` is called after each of their batches.
    """
    landing = Landing(
        spark,
        source_options,
        target_table,
        table_format=table_format,
        snapshot_chunk_rows=snapshot_chunk_rows or CHUNK_ROWS,
    )
    try:
        return landing.run(on_stage=on_stage, on_progress=on_progress)
    finally:
        landing.close()
