"""Client processes the fault scenarios can SIGKILL, SIGSTOP and SIGCONT.

Each :class:`Child` is a separate Python process (``python -m tests.support.faults.worker``) with
its own PostgreSQL connection. The parent sends it JSON commands on stdin and reads
JSON events from its stdout, so a scenario can stop a writer at an exact step (after
the lock, after the inserts, just before commit) and then freeze or kill it there.
A killed child cannot tell the parent how its write ended; the parent knows which step
it last reported and records the write as ``failed`` (commit never sent) or
``unknown`` (commit sent, no answer).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The repository root, so that the child can import tests.support.faults.worker.
REPO = Path(__file__).resolve().parents[3]


class ChildError(AssertionError):
    """The child reported something the scenario did not expect."""


class Child:
    """A worker process holding its own connection; see the module docstring."""

    def __init__(self, uri: str, feed: dict[str, Any], name: str = "child") -> None:
        self.name = name
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
        )
        config = json.dumps({"uri": uri, "feed": feed, "name": name})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.faults.worker", config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=env,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr: list[str] = []
        self.last: dict[str, Any] | None = None
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        ready = self.expect("ready", timeout=30)
        self.backend_pid: int = int(ready["backend_pid"])

    # -- plumbing ---------------------------------------------------------------------

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line:
                self.events.put(json.loads(line))
        self.events.put({"ev": "exit"})

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, op: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def next_event(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            raise ChildError(
                f"{self.name}: no event within {timeout} s (last: {self.last}); "
                f"stderr: {''.join(self.stderr)[-2000:]}"
            ) from None
        self.last = event
        return event

    def expect(self, ev: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for event ``ev``; any other event (an error, an exit) fails the scenario."""
        event = self.next_event(timeout)
        if event["ev"] != ev:
            raise ChildError(
                f"{self.name}: expected {ev!r}, got {event}; stderr: {''.join(self.stderr)[-2000:]}"
            )
        return event

    def expect_through(self, ev: str, timeout: float = 30.0) -> dict[str, Any]:
        """Skip the steps before ``ev`` (``locked``, ``inserted``, ...); fail on an error."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next_event(max(0.01, deadline - time.monotonic()))
            if event["ev"] == ev:
                return event
            if event["ev"] in ("error", "exit", "ok", "page", "moved", "rows"):
                raise ChildError(
                    f"{self.name}: expected {ev!r}, got {event}; "
                    f"stderr: {''.join(self.stderr)[-2000:]}"
                )

    # -- faults -----------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL: no cleanup, no goodbye; the socket is closed by the kernel."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            # End of input: a child waiting for a command (or a go) exits at once.
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(predicate: Any, timeout: float, interval: float = 0.01, what: str = "") -> float:
    """Poll ``predicate`` until true; return the seconds it took, or fail after ``timeout``."""
    start = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)
