"""Continuous landing: runs of one :class:`Landing` until stopped.

Two periods govern it. ``poll`` is how often it looks for new events: a look that finds
none is a few index probes on one kept connection, no Spark job. ``interval`` is the
least time between the starts of two runs that land a batch: each batch is a partition
(and at least one file), so it bounds how fast the table's partition list grows
(3,600 / ``interval`` per hour). An event therefore lands within about ``interval`` plus
one run's time of its commit (docs/spark-source.md, "Continuous landing").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from changefeed.spark.landing._landing import Landing, LandingResult, StageCallback
from changefeed.spark.source import ChangefeedSourceError

#: The accepted ``interval`` range, in seconds. Below half a second the batches would
#: mostly hold the partition overhead, not events (docs/performance.md).
MIN_INTERVAL = 0.5
MAX_INTERVAL = 86_400.0
#: The shortest ``poll``: each look costs a few queries on the source database.
MIN_POLL = 0.05


def check_timing(interval: float, poll: float | None) -> float:
    """Check ``interval`` and ``poll`` (seconds); return ``poll`` (``None``: ``interval``)."""
    if not (isinstance(interval, int | float) and math.isfinite(interval)
            and MIN_INTERVAL <= interval <= MAX_INTERVAL):  # fmt: skip
        raise ChangefeedSourceError(
            f"interval must be between {MIN_INTERVAL:g} and {MAX_INTERVAL:,.0f} seconds (the "
            f"least time between the starts of two landed batches), got {interval!r}"
        )
    if poll is None:
        return float(interval)
    if not (isinstance(poll, int | float) and math.isfinite(poll)
            and MIN_POLL <= poll <= interval):  # fmt: skip
        raise ChangefeedSourceError(
            f"poll must be between {MIN_POLL:g} seconds and the interval ({interval:g} s): "
            f"how often to look for new events between batches; got {poll!r}"
        )
    return float(poll)


def land_continuously(
    spark: Any,
    source_options: Mapping[str, str],
    target_table: str,
    *,
    interval: float = 60.0,
    poll: float | None = None,
    stop: threading.Event | None = None,
    on_result: Callable[[LandingResult], None] | None = None,
    on_stage: StageCallback | None = None,
    table_format: str | None = None,
) -> int:
    """Land ``source_options``' feed into ``target_table`` until ``stop`` is set; return
    the number of batches landed. Runs start ``poll`` seconds apart (default: the
    ``interval``), and a run that lands a batch starts no sooner than ``interval`` seconds
    after the previous one that did; see the module doc. ``on_result`` receives every
    run's result; ``on_stage`` and ``table_format`` are :func:`land`'s. An error ends
    the loop and is raised; every batch committed before it stays, and a new call
    continues from the table.
    """
    poll = check_timing(interval, poll)
    stop = stop if stop is not None else threading.Event()
    landing = Landing(
        spark, source_options, target_table, keep_connection=True, table_format=table_format
    )
    batches, last_batch_start = 0, -math.inf
    try:
        while not stop.is_set():
            started = time.monotonic()
            result = landing.run(on_stage=on_stage)
            if on_result is not None:
                on_result(result)
            if result.batch is not None:
                batches, last_batch_start = batches + 1, started
            next_start = max(started + poll, last_batch_start + interval)
            if stop.wait(max(0.0, next_start - time.monotonic())):
                break
    finally:
        landing.close()
    return batches
