"""Progress lines: every line is stamped with the seconds since the demo started, and a
ticker repeats the current activity every few seconds, so the demo never goes quiet."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO


class Progress:
    def __init__(self, out: TextIO | None = None, every: float = 5.0) -> None:
        # A duplicate of stdout: while Spark starts, file descriptors 1 and 2 point at
        # Spark's log (the JVM inherits them), and progress must still reach the terminal.
        self.out = out if out is not None else _own_stdout()
        self.every = every
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._last = self.started
        self._activity = ""
        self._activity_since = self.started
        self._status: Callable[[], str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="demo-progress", daemon=True)
        self._thread.start()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        with self._lock:
            for line in message.splitlines() or [""]:
                self.out.write(f"[{self.elapsed():5.0f}s] {line}\n")
            self.out.flush()
            self._last = time.monotonic()

    def plain(self, message: str = "") -> None:
        """A line without a time stamp (the summary)."""
        with self._lock:
            self.out.write(message + "\n")
            self.out.flush()
            self._last = time.monotonic()

    @contextlib.contextmanager
    def step(self, activity: str, done: str | None = None) -> Iterator[None]:
        """Announce ``activity``, keep repeating it while it runs, then say how long it took."""
        self.say(f"{activity} ...")
        previous = self._activity, self._activity_since
        self._activity, self._activity_since = activity, time.monotonic()
        started = time.monotonic()
        try:
            yield
        finally:
            self._activity, self._activity_since = previous
        self.say(f"{done or activity}: done in {time.monotonic() - started:.1f} s")

    def set_activity(self, activity: str) -> None:
        self._activity, self._activity_since = activity, time.monotonic()

    def set_status(self, status: Callable[[], str] | None) -> None:
        """While set, the ticker prints ``status()`` (plus the activity) every ``every`` s."""
        self._status = status

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            if time.monotonic() - self._last < self.every:
                continue
            status = self._status
            activity = self._activity
            since = time.monotonic() - self._activity_since
            if status is not None:
                line = status() + (f" | now: {activity}" if activity else "")
            elif activity:
                line = f"... still {activity} ({since:.0f} s)"
            else:
                continue
            self.say(line)


def _own_stdout() -> TextIO:
    try:
        sys.stdout.flush()
        return open(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    except (AttributeError, OSError, ValueError):  # no real file descriptor (e.g. captured)
        return sys.stdout
