"""A landing service: many feeds landed from one Spark application, once or continuously.

Each feed keeps its own :class:`Landing` (so its own writer lock, cursors and table
checks: everything that holds for one landing holds for each feed) in its own Spark
session of the one application (``spark.newSession()``: the same JVM, executors and
catalogs, its own SQL settings, so that one feed's write settings never leak into
another's; on Spark Connect, which has no ``newSession``, a clone of the client's
session on the server, isolated from it from then on). A pool of worker threads runs
them: a feed is *due* when its ``poll`` and ``interval`` say so, and a free worker takes
the feed that has been due longest. A feed whose runs are slow holds one worker and
never the others; a failed run is logged, kept in the feed's :class:`FeedState` and
retried after a backoff that doubles from ``retry_initial`` up to ``retry_max`` seconds,
while the other feeds go on. Setting the ``stop`` event lets each worker finish the run
it is in (its batch commits or not, as for one landing) and start no other.
"""

from __future__ import annotations

import fnmatch
import heapq
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from changefeed.client import ChangefeedError, redact
from changefeed.service_state import FeedState, write_status_file
from changefeed.spark import is_connect
from changefeed.spark.landing._continuous import check_timing
from changefeed.spark.landing._landing import Landing, LandingResult
from changefeed.spark.source import ChangefeedSourceError, open_backend, parse_options

LOG = logging.getLogger("changefeed.landing")

#: The placeholders of a table template: the two parts of the feed's id.
TABLE_PLACEHOLDERS = ("schema", "table")
#: The default number of worker threads: feeds landed at the same moment (most runs find
#: nothing new and cost a few index probes; a run that lands a batch holds its worker for
#: the Spark job).
DEFAULT_WORKERS = 8


@dataclass(frozen=True)
class FeedTarget:
    """One feed of a landing service: the options of ``format("changefeed")`` (with
    ``connection`` and ``feed``, as :func:`land` takes them), the table it lands into, and
    the format of a table the service creates (``None``: :func:`land`'s default)."""

    source_options: Mapping[str, str]
    table: str
    table_format: str | None = None

    @property
    def feed(self) -> str:
        return str(self.source_options.get("feed", ""))


#: ``on_error(target, error, retry_in)``: a run of ``target`` failed; the next is in
#: ``retry_in`` seconds (``None``: a one-shot run gave up).
ErrorCallback = Callable[[FeedTarget, BaseException, float | None], None]


def _session_of_its_own(spark: Any) -> Any:
    """A session of ``spark``'s application with SQL settings of its own."""
    if not is_connect(spark):
        return spark.newSession()
    clone = spark.cloneSession()
    # PySpark 4.1's clone lacks this attribute, which its stop() reads (AttributeError)
    clone.release_session_on_close = True
    return clone


def resolve_targets(
    shared_options: Mapping[str, str],
    feeds: Iterable[str],
    table: str,
    *,
    table_format: str | None = None,
    registered: Sequence[str] | None = None,
) -> list[FeedTarget]:
    """The targets of ``feeds`` (feed ids, or patterns such as ``shop.*`` matched with
    :mod:`fnmatch` against the feeds registered in the database), each landed into
    ``table`` with ``{schema}`` and ``{table}`` replaced by the two parts of the feed's id
    (``landing.{schema}_{table}``), with ``shared_options`` (``connection`` and the other
    options of :func:`land`). ``registered``: the database's feed ids, read from it when
    ``None`` and a pattern needs them. Raises :class:`ChangefeedSourceError` for a pattern
    that matches nothing, a template without a placeholder while more than one feed
    resolves, or an unknown placeholder."""
    wanted = [f.strip() for f in feeds if f.strip()]
    if not wanted:
        raise ChangefeedSourceError("a landing service needs at least one feed")
    ids: list[str] = []
    for item in wanted:
        if not any(ch in item for ch in "*?["):
            ids.append(item)
            continue
        if registered is None:
            registered = _registered(shared_options)
        matched = fnmatch.filter(registered, item)
        if not matched:
            raise ChangefeedSourceError(
                f"feed pattern {item!r} matches no feed registered in the database "
                f"({len(registered)} registered: {_listed(registered)}); set the feeds up "
                "first (dbt run-operation changefeed.setup_feed) or fix the pattern"
            )
        ids.extend(matched)
    ids = list(dict.fromkeys(ids))
    if len(ids) > 1 and not any("{" + p + "}" in table for p in TABLE_PLACEHOLDERS):
        raise ChangefeedSourceError(
            f"{len(ids)} feeds would all land into {table!r}: a table has one feed; name "
            "each feed's table with a template such as 'landing.{schema}_{table}'"
        )
    return [
        FeedTarget({**shared_options, "feed": feed}, table_name(table, feed), table_format)
        for feed in ids
    ]


def table_name(template: str, feed: str) -> str:
    """``template`` with ``{schema}`` and ``{table}`` of ``feed`` filled in.

    >>> table_name("landing.{schema}_{table}", "shop.orders")
    'landing.shop_orders'
    >>> table_name("landing.orders_feed", "shop.orders")
    'landing.orders_feed'
    """
    schema, _, name = feed.rpartition(".")
    try:
        return template.format(schema=schema, table=name)
    except (KeyError, IndexError, ValueError) as exc:
        raise ChangefeedSourceError(
            f"table template {template!r}: {exc!s} is not a placeholder; use {{schema}} and "
            "{table} (the two parts of the feed's id), e.g. 'landing.{schema}_{table}'"
        ) from None


def _registered(shared_options: Mapping[str, str]) -> list[str]:
    # Any well-formed feed id: only the connection and the schema are used.
    options = parse_options({**shared_options, "feed": "pattern.match"})
    with open_backend(options.connection, options.changefeed_schema) as backend:
        return backend.registered_feeds()


def _listed(names: Sequence[str], most: int = 10) -> str:
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names) - most} more)" if len(names) > most else "") or "none"


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    index: int = field(compare=False)


class LandingService:
    """Lands ``targets`` from one Spark application (see the module doc).

    ``interval`` and ``poll`` are each feed's, as in :func:`land_continuously`;
    ``workers``: the number of feeds landed at the same moment (default
    :data:`DEFAULT_WORKERS`, at most one per feed). A failed run is retried after
    ``retry_initial`` seconds, doubling per failure in a row up to ``retry_max``.
    ``on_result`` receives each run's :class:`LandingResult` with its target, ``on_error``
    each failure (:data:`ErrorCallback`). ``status_file``: a JSON file rewritten
    (atomically) whenever a feed's state changes and at most every few seconds otherwise,
    which ``changefeed status --service FILE`` reads. Two targets with one table are
    refused, as is a table name that cannot be a feed table, before anything runs.
    Call :meth:`close` at the end (the runs' connections, with their writer locks).
    """

    #: Seconds between two rewrites of the status file when no state changed.
    STATUS_EVERY = 5.0

    def __init__(
        self,
        spark: Any,
        targets: Sequence[FeedTarget],
        *,
        interval: float = 60.0,
        poll: float | None = None,
        workers: int | None = None,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        on_result: Callable[[FeedTarget, LandingResult], None] | None = None,
        on_error: ErrorCallback | None = None,
        status_file: str | Path | None = None,
    ) -> None:
        if not targets:
            raise ChangefeedSourceError("a landing service needs at least one feed")
        self.poll = check_timing(interval, poll)
        self.interval = float(interval)
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ChangefeedSourceError(f"workers must be a positive number, got {workers!r}")
        if not (0 < retry_initial <= retry_max and math.isfinite(retry_max)):
            raise ChangefeedSourceError(
                "retry_initial and retry_max must be seconds with 0 < retry_initial <= "
                f"retry_max, got {retry_initial!r} and {retry_max!r}"
            )
        self.workers = min(workers or DEFAULT_WORKERS, len(targets))
        self.retry_initial, self.retry_max = float(retry_initial), float(retry_max)
        self.targets = list(targets)
        self.on_result, self.on_error = on_result, on_error
        self.status_file = Path(status_file) if status_file is not None else None
        self.landings: list[Landing] = []
        try:
            for target in self.targets:
                self.landings.append(
                    Landing(_session_of_its_own(spark), target.source_options, target.table,
                            keep_connection=True, table_format=target.table_format)
                )  # fmt: skip
        except BaseException:
            self.close()
            raise
        seen: dict[str, str] = {}
        for target, landing in zip(self.targets, self.landings, strict=True):
            table = landing.table.text
            if table in seen:
                self.close()
                raise ChangefeedSourceError(
                    f"table {table} is named twice in the service (feeds {seen[table]} and "
                    f"{target.feed}): a table has one feed and one writer; give each feed its "
                    "own table"
                )
            seen[table] = target.feed
        self._status = [
            FeedState(t.feed, ln.table.text)
            for t, ln in zip(self.targets, self.landings, strict=True)
        ]
        self._lock = threading.Condition()
        self._written = -math.inf
        self._started = time.time()

    def status(self) -> list[FeedState]:
        """A copy of every feed's :class:`FeedState`, in the targets' order."""
        with self._lock:
            return [FeedState(**asdict(s)) for s in self._status]

    def run_once(
        self, *, attempts: int = 3, stop: threading.Event | None = None
    ) -> list[FeedState]:
        """Land each feed once (at most one batch each, after its pending snapshot
        requests), retrying a failed one up to ``attempts`` runs in all; return every
        feed's status (``ok`` or ``failed``). A failing feed never holds back the others."""
        if not isinstance(attempts, int) or attempts < 1:
            raise ChangefeedSourceError(f"attempts must be a positive number, got {attempts!r}")
        return self._serve(stop or threading.Event(), attempts)

    def run(self, stop: threading.Event) -> list[FeedState]:
        """Land every feed continuously until ``stop`` is set; return every feed's status.
        A feed's failures are retried for as long as the service runs."""
        return self._serve(stop, None)

    def close(self) -> None:
        for landing in self.landings:
            landing.close()
            if is_connect(landing.spark):
                # a clone's server-side session and channel (classic newSession()s share
                # the application's context, which stop() would end)
                landing.spark.stop()

    # -- the scheduler ------------------------------------------------------------------

    def _serve(self, stop: threading.Event, attempts: int | None) -> list[FeedState]:
        now = time.monotonic()
        self._queue = [_Due(now, i, i) for i in range(len(self.targets))]
        heapq.heapify(self._queue)
        self._seq = len(self.targets)
        self._running = 0
        self._last_batch_start = [-math.inf] * len(self.targets)
        fatal: list[BaseException] = []

        def worker() -> None:
            try:
                self._work(stop, attempts)
            except BaseException as exc:  # an interpreter-level failure: stop the service
                fatal.append(exc)
                stop.set()
                with self._lock:
                    self._lock.notify_all()

        done = threading.Event()

        # Wake the sleeping workers when stop is set from outside (a signal handler).
        def waker() -> None:
            while not stop.wait(0.5):
                if done.is_set():
                    return
            with self._lock:
                self._lock.notify_all()

        threads = [
            threading.Thread(target=worker, name=f"changefeed-landing-{n}", daemon=True)
            for n in range(self.workers)
        ]
        threading.Thread(target=waker, name="changefeed-landing-stop", daemon=True).start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        self._write_status(force=True)
        if fatal:
            raise fatal[0]
        return self.status()

    def _work(self, stop: threading.Event, attempts: int | None) -> None:
        while True:
            with self._lock:
                while True:
                    if stop.is_set() or (not self._queue and self._running == 0):
                        self._lock.notify_all()
                        return
                    now = time.monotonic()
                    if self._queue and self._queue[0].at <= now:
                        index = heapq.heappop(self._queue).index
                        self._running += 1
                        self._status[index].state = "running"
                        break
                    wait = self._queue[0].at - now if self._queue else None
                    self._lock.wait(wait)
            again = self._run_one(index, attempts)
            with self._lock:
                self._running -= 1
                if again is not None:
                    self._seq += 1
                    heapq.heappush(self._queue, _Due(again, self._seq, index))
                self._lock.notify_all()

    def _run_one(self, index: int, attempts: int | None) -> float | None:
        """Run feed ``index`` once; when it is due again (monotonic), or ``None``."""
        target, landing, status = self.targets[index], self.landings[index], self._status[index]
        started = time.monotonic()
        try:
            result = landing.run()
        except Exception as exc:
            with self._lock:
                status.runs += 1
                status.failures += 1
                status.last_error = _first_line(exc)
                give_up = attempts is not None and status.failures >= attempts
                delay = None if give_up else self._backoff(status.failures)
                status.state = "failed" if give_up else "retrying"
                status.retry_at = None if delay is None else time.time() + delay
            LOG.warning(
                "%s -> %s: run failed (%d in a row), %s: %s", target.feed, status.table,
                status.failures, "giving up" if delay is None else f"retrying in {delay:.0f} s",
                status.last_error,
            )  # fmt: skip
            if self.on_error is not None:
                self.on_error(target, exc, delay)
            self._write_status(force=True)
            return None if delay is None else time.monotonic() + delay
        changed = status.state != "ok" or result.batch is not None or bool(result.snapshots)
        with self._lock:
            status.runs += 1
            status.failures, status.last_error, status.retry_at = 0, None, None
            status.state = "ok"
            status.last_success = time.time()
            if result.batch is not None:
                status.batches += 1
                status.events += result.events
                status.last_batch = status.last_success
                self._last_batch_start[index] = started
        if self.on_result is not None:
            self.on_result(target, result)
        self._write_status(force=changed)
        if attempts is not None:
            return None
        return max(started + self.poll, self._last_batch_start[index] + self.interval)

    def _backoff(self, failures: int) -> float:
        return float(min(self.retry_max, self.retry_initial * 2 ** (failures - 1)))

    def _write_status(self, *, force: bool) -> None:
        if self.status_file is None:
            return
        with self._lock:
            now = time.monotonic()
            if not force and now - self._written < self.STATUS_EVERY:
                return
            self._written = now
            service = {
                "pid": os.getpid(), "started": self._started, "written": time.time(),
                "workers": self.workers, "interval": self.interval, "poll": self.poll,
            }  # fmt: skip
            write_status_file(self.status_file, service, self._status)


def _first_line(exc: BaseException) -> str:
    """The error's first line, its class named unless it is one of ours (whose messages
    name the cause), connection passwords redacted (Spark's messages go on for pages)."""
    lines = str(exc).strip().splitlines()
    text = redact(lines[0]) if lines else ""
    if isinstance(exc, ChangefeedError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
