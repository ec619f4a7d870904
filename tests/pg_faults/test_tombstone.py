"""S3: a consumer tombstones a pending write just as that write commits.

Both sides update the same session row with the predicate ``state = 0``, so exactly one
wins: either the commit succeeds and the tombstone returns false, or the tombstone
returns true (burning the generation and recording an incident) and the commit fails
with CF001. Never both, never neither. A thread barrier releases both sides together
and a small random delay on one side or the other makes each side win sometimes.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pytest
from tests.support.faults.checker import History, check
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import record_write, write_once

from changefeed.client import WriteAbandoned

pytestmark = pytest.mark.postgres


def race_once(
    kit: FeedKit,
    wconn: psycopg.Connection[Any],
    tconn: psycopg.Connection[Any],
    history: History,
    keys: list[int],
    writer_delay: float,
    tomb_delay: float,
) -> tuple[bool, bool, str]:
    """One write whose commit and a tombstone of it start together: (committed, won, detail)."""
    gate = threading.Barrier(2)
    won: list[bool] = []
    locked: dict[str, Any] = {}
    ready = threading.Event()

    def step(name: str, **data: Any) -> None:
        if name == "locked":
            locked.update(data)
            ready.set()
        if name == "committing":
            gate.wait(10)
            time.sleep(writer_delay)

    def tombstone() -> None:
        ready.wait(10)
        gate.wait(10)
        time.sleep(tomb_delay)
        won.append(kit.client.tombstone(tconn, 0, locked["backend_pid"], locked["write_id"]))

    tomb = threading.Thread(target=tombstone)
    tomb.start()
    write = record_write(kit, wconn, history, 0, keys, step=step)
    tomb.join(10)
    assert len(won) == 1, "the tombstone call did not finish"
    return write.outcome == "ok", won[0], write.detail


def test_tombstone_races_commit(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any]
) -> None:
    kit = make_feed("blocking", stall_timeout_ms=5000)
    history = History()
    wconn, tconn = connect(), connect()
    rng = random.Random(7)
    outcomes = {"commit": 0, "tombstone": 0}
    attempt = 0
    deadline = time.monotonic() + 60
    while attempt < 20 or min(outcomes.values()) < 3:
        assert attempt < 200 and time.monotonic() < deadline, outcomes
        lead = rng.random() * 0.003
        writer_delay, tomb_delay = (lead, 0.0) if attempt % 2 else (0.0, lead)
        committed, won, detail = race_once(
            kit, wconn, tconn, history, [attempt * 10, attempt * 10 + 1], writer_delay, tomb_delay
        )
        # S3: exactly one side wins.
        assert committed != won, (committed, won, detail)
        if committed:
            outcomes["commit"] += 1
        else:
            outcomes["tombstone"] += 1
            assert detail.startswith(WriteAbandoned.__name__), detail
            assert "CF001" in detail
        attempt += 1
    incidents = kit.incidents(admin)
    assert len(incidents) == outcomes["tombstone"]
    assert {i["reason"] for i in incidents} == {"tombstone"}
    assert kit.generation(admin, 0) == outcomes["tombstone"]  # each win burned one
    summary = check(history, kit.final(admin))
    assert summary.writes_ok == outcomes["commit"]
    assert summary.writes_failed == outcomes["tombstone"]
    # The shard still works after every burn.
    assert write_once(kit, wconn, history, 0, [999_999])
