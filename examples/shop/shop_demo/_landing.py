"""The demo's landing: each feed landed continuously (``changefeed land --continuous``) in a
thread of its own, and the committed -> landed latency of every event it landed.

The latency is measured as in benchmarks/landing_latency.py: from the moment the writer's
COMMIT returned (recorded by the load generator, per key) to the moment the batch holding
the event was committed in Spark (the landing's ``committed`` stage).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shop_demo._errors import DemoError

#: ``changefeed land --continuous --interval 1 --poll 0.1``: the low-latency mode whose
#: bar is p50 <= 2 s and p99 <= 5 s (docs/performance.md, "Continuous landing latency").
INTERVAL = 1.0
POLL = 0.1


@dataclass
class LandedBatch:
    """One batch a continuous landing committed (``t``: seconds since the load started)."""

    feed: str
    batch: int
    events: int
    t: float
    committed_at: float  # wall clock, time.time()


@dataclass
class FeedLanding:
    """``land_continuously`` of one feed into its table, in a background thread."""

    spark: Any
    uri: str
    feed: str
    table: str
    clock: Callable[[], float]  # seconds since the load started, for the chart
    on_batch: Callable[[LandedBatch], None]
    batches: list[LandedBatch] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ran: threading.Condition = field(default_factory=threading.Condition)
    _last_run_started: float = -float("inf")
    _error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"land {self.feed}")
        self._thread.start()

    def wait_for_a_run_started_after(self, moment: float, timeout: float) -> None:
        """Wait until a run that started after ``moment`` (``time.monotonic()``) is done:
        after a barrier, that run has landed everything committed before it."""
        deadline = time.monotonic() + timeout
        with self._ran:
            while self._last_run_started <= moment and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DemoError(
                        f"the landing of {self.feed} did not finish a run within {timeout:g} s; "
                        "see the Spark log in the state directory's logs/"
                    )
                self._ran.wait(min(left, 0.2))
        self._raise()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                self._thread.join(0.2)  # short joins keep Ctrl-C responsive
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            text = str(self._error).strip()
            first = text.splitlines()[0] if text else type(self._error).__name__
            raise DemoError(
                f"landing {self.feed} into {self.table} failed: {first}"
            ) from self._error

    def _run(self) -> None:
        from changefeed.spark.landing import land_continuously

        options: Mapping[str, str] = {"connection": self.uri, "feed": self.feed, "payload": "true"}
        committed: dict[int, float] = {}

        def on_stage(stage: str, details: Mapping[str, Any]) -> None:
            if stage == "committed":
                committed[int(details["batch"])] = time.time()

        def on_result(result: Any) -> None:
            if result.batch is not None:
                landed = LandedBatch(self.feed, result.batch, result.events, self.clock(),
                                     committed[result.batch])  # fmt: skip
                self.batches.append(landed)
                self.on_batch(landed)
            with self._ran:
                self._last_run_started = time.monotonic() - result.seconds
                self._ran.notify_all()

        # A session of its own (same Spark, same catalog): a batch write sets and then
        # restores spark.sql.sources.partitionOverwriteMode, a session setting, and the
        # other feed's landing and dbt's insert_overwrite must not see it change mid-write.
        spark = self.spark.newSession()
        try:
            land_continuously(spark, options, self.table, interval=INTERVAL, poll=POLL,
                              stop=self._stop, on_result=on_result, on_stage=on_stage)  # fmt: skip
        except BaseException as exc:
            with self._ran:
                self._error = exc
                self._ran.notify_all()


def event_latencies(
    spark: Any,
    table: str,
    key: str,
    batches: list[LandedBatch],
    commits: Mapping[int, list[float]],
) -> dict[int, list[float]]:
    """Batch -> the committed -> landed latency (s) of each of its events.

    A key's events are matched to its commits in order: the writers change one key in one
    transaction at a time, so a key's events' ULID order is its commit order. A key whose
    events and recorded commits differ in number (a commit whose outcome the writer did
    not learn) is left out rather than guessed.
    """
    if not batches:
        return {}
    landed_at = {b.batch: b.committed_at for b in batches}
    numbers = ", ".join(str(b) for b in sorted(landed_at))
    rows = spark.sql(
        f"select {key}, changefeed_batch from {table} where changefeed_batch in ({numbers}) "
        f"order by {key}, ulid"
    ).collect()
    by_key: dict[int, list[int]] = {}
    for row in rows:
        by_key.setdefault(int(row[0]), []).append(int(row[1]))
    latencies: dict[int, list[float]] = {b: [] for b in landed_at}
    for k, landed in by_key.items():
        committed = commits.get(k, [])
        if len(committed) != len(landed):
            continue
        for batch, at in zip(landed, committed, strict=True):
            latencies[batch].append(landed_at[batch] - at)
    return latencies


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile of ``values`` (0 < q <= 1), as benchmarks/landing_latency.py.

    >>> percentile([3.0, 1.0, 2.0, 4.0], 0.5), percentile([3.0, 1.0, 2.0, 4.0], 0.99)
    (3.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
