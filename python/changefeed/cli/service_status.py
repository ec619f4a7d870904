"""``changefeed status --service FILE``: a landing service's feeds from its status file
(``changefeed land --status-file``), without Spark or a database."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from changefeed.cli import CliError
from changefeed.service_state import FAILING, FeedState, StatusFileError, read_status_file


def read_service(path: Path) -> tuple[dict[str, Any], list[FeedState]]:
    """The status file's service fields, with ``alive`` added (whether its process still
    runs; ``None`` when that cannot be told), and its feeds' states."""
    try:
        service, feeds = read_status_file(path)
    except StatusFileError as exc:
        raise CliError(str(exc)) from None
    service["alive"] = _alive(service.get("pid"))
    return service, feeds


def _alive(pid: Any) -> bool | None:
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def render_service(
    service: dict[str, Any], feeds: list[FeedState], now: float | None = None
) -> str:
    """The service's header line and one line per feed.

    >>> feeds = [FeedState("shop.orders", "l.orders", "ok", 9, 2, 30),
    ...          FeedState("shop.items", "l.items", "retrying", 3, 0, 0, 3, "cannot connect")]
    >>> print(render_service({"pid": 7, "written": 100.0, "alive": False}, feeds, now=112.0))
    landing service (pid 7, not running; written 12 s ago): 2 feeds, 1 failing
      shop.orders -> l.orders: ok, 2 batches, 30 events in 9 runs
      shop.items -> l.items: retrying after 3 failures in a row: cannot connect
    """
    failing = sum(1 for f in feeds if f.state in FAILING)
    alive = {True: "running", False: "not running", None: "state unknown"}[service.get("alive")]
    age = (now if now is not None else time.time()) - float(service.get("written", 0.0))
    head = (
        f"landing service (pid {service.get('pid', '?')}, {alive}; written {age:.0f} s ago): "
        f"{len(feeds)} feeds, {failing} failing"
    )
    return "\n".join([head, *(f"  {f.line()}" for f in feeds)])
