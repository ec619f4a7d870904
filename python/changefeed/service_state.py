"""A landing service's state per feed, and the status file that carries it from the
service (:class:`changefeed.spark.landing.LandingService`) to ``changefeed status
--service FILE``, which reads it without Spark or a database. Pure Python: no PySpark."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from changefeed.errors import ChangefeedError

#: The states of a feed (see :class:`FeedState`) that mean it is failing.
FAILING = ("retrying", "failed")


class StatusFileError(ChangefeedError, ValueError):
    """A status file that cannot be read or is not a landing service's."""


@dataclass
class FeedState:
    """What a landing service knows of one feed. ``state``: ``pending`` (not run yet),
    ``running``, ``ok`` (its last run succeeded), ``retrying`` (its last run failed; the
    next is at ``retry_at``) or ``failed`` (a one-shot run gave up after its attempts).
    Times are Unix seconds; counts are of this service's runs: ``failures`` in a row."""

    feed: str
    table: str
    state: str = "pending"
    runs: int = 0
    batches: int = 0
    events: int = 0
    failures: int = 0
    last_error: str | None = None
    last_success: float | None = None
    last_batch: float | None = None
    retry_at: float | None = None

    def line(self) -> str:
        """One line for a terminal.

        >>> FeedState("shop.orders", "landing.orders", "ok", 4, 2, 30).line()
        'shop.orders -> landing.orders: ok, 2 batches, 30 events in 4 runs'
        >>> FeedState("shop.x", "l.x", "retrying", 3, 0, 0, 3, "cannot connect").line()
        'shop.x -> l.x: retrying after 3 failures in a row: cannot connect'
        """
        head = f"{self.feed} -> {self.table}: {self.state}"
        if self.state in FAILING:
            times = "failure" if self.failures == 1 else "failures"
            return f"{head} after {self.failures} {times} in a row: {self.last_error}"
        batches = "batch" if self.batches == 1 else "batches"
        events = "event" if self.events == 1 else "events"
        runs = "run" if self.runs == 1 else "runs"
        return f"{head}, {self.batches:,} {batches}, {self.events:,} {events} in {self.runs} {runs}"


def write_status_file(path: Path, service: dict[str, Any], feeds: list[FeedState]) -> None:
    """Write the file atomically: a reader sees the previous file or this one, never a
    part (a temporary file beside it, then a rename)."""
    document = {"service": service, "feeds": [asdict(f) for f in feeds]}
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(partial, path)


def read_status_file(path: Path) -> tuple[dict[str, Any], list[FeedState]]:
    """The service's fields (``pid``, ``started``, ``written``, ``workers``, ...) and its
    feeds' states; raises :class:`StatusFileError` naming the cause."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise StatusFileError(
            f"cannot read the landing service's status file {path}: {exc.strerror or exc} "
            "(`changefeed land --status-file FILE` writes it)"
        ) from None
    except ValueError:
        raise StatusFileError(f"{path} is not a landing service's status file (not JSON)") from None
    try:
        feeds = [FeedState(**f) for f in document["feeds"]]
        service = dict(document["service"])
    except (KeyError, TypeError, ValueError):
        raise StatusFileError(
            f"{path} is not a landing service's status file (it needs `service` and `feeds`)"
        ) from None
    return service, feeds
