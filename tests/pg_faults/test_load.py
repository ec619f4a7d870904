"""Many writers and readers at once, blocking and outbox mode, one shard and many.

Invariants: A1 (unique, ordered, later commits above earlier ones in real time), O1/O2
(outbox rows become exactly one event, one block per transaction), S1/S4 (no reader
ever skips an event: every page is the exact slice of the final feed after its cursor),
C2 (pages end at transaction boundaries), C3 (all readers see the same sequence).
"""

from __future__ import annotations

import pytest
from tests.support.faults.checker import check
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import run_load

#: Writers and readers at once for seconds per test: slow on their own (docs/testing.md).
pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
@pytest.mark.parametrize(
    ("shards", "writers", "writes"),
    [pytest.param([0], 6, 40, id="one-shard"), pytest.param([0, 1, 2, 7], 6, 40, id="4-shards")],
)
def test_writers_and_readers(
    make_feed: MakeFeed,
    connect: Connections,
    mode: str,
    shards: list[int],
    writers: int,
    writes: int,
) -> None:
    kit = make_feed(mode, stall_timeout_ms=2000)
    result = run_load(
        kit,
        connect,
        shards=shards,
        writers=writers,
        writes_per_writer=writes,
        readers=3,
        seed=len(shards),
    )
    assert not result.errors, result.errors
    final = kit.final(connect())
    summary = check(result.history, final)
    # Nothing was refused: live writers never stall each other past stall_timeout_ms.
    assert summary.writes_ok == writers * writes, [
        w.detail for w in result.history.writes.values() if w.outcome != "ok"
    ]
    # Every reader caught up and saw exactly the final sequence of every shard.
    for reader in result.readers:
        for shard in shards:
            assert reader.seen.get(shard, []) == final.get(shard, []), reader.name
    assert summary.page_events >= 3 * summary.events


def test_commits_out_of_block_order(make_feed: MakeFeed, connect: Connections) -> None:
    """Protocol 2: a writer releases the shard lock in update_state, before its COMMIT, so
    the next writer may commit first. Here every write pauses up to 20 ms between the two,
    which makes that common; readers must still never skip the slower, lower block (S1)."""
    kit = make_feed("blocking", stall_timeout_ms=2000)
    result = run_load(
        kit, connect, shards=[0], writers=6, writes_per_writer=30, readers=3, seed=7,
        commit_delay_s=0.02,
    )  # fmt: skip
    assert not result.errors, result.errors
    final = kit.final(connect())
    summary = check(result.history, final)
    assert summary.writes_ok == 6 * 30, [
        w.detail for w in result.history.writes.values() if w.outcome != "ok"
    ]
    for reader in result.readers:
        assert reader.seen.get(0, []) == final.get(0, []), reader.name
    # The scenario happened: some write with a higher block finished its COMMIT before a
    # write with a lower block had even sent its own.
    inversions = sum(
        1
        for a in result.splits
        for b in result.splits
        if a["first_ulid"] < b["first_ulid"] and b["committed"] < a["commit_sent"]
    )
    assert inversions > 0
