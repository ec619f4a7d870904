"""The checker catches what it claims to: hand-made good and bad histories.

No database here: these run in milliseconds and prove that a passing fault scenario
means something.
"""

from __future__ import annotations

import pytest
from tests.support.faults.checker import (
    ZERO_ULID,
    Event,
    History,
    HistoryViolation,
    block_of,
    check,
)

BLOCK = 1 << 36


def ulid(ms: int, block: int, i: int = 0, rand: int = 0xABCD) -> bytes:
    """A ULID of the protocol's layout: ts48 || rand16 || int8(block * 2^36 + i)."""
    low = block * BLOCK + i
    return ms.to_bytes(6, "big") + rand.to_bytes(2, "big") + low.to_bytes(8, "big", signed=True)


def good_run() -> tuple[History, dict[int, list[Event]]]:
    """Three transactions on shard 0, one on shard 1, one failed, two readers."""
    h = History()
    a = h.begin_write(0, [("a", 1), ("a", 2)])
    h.end_write(a, "ok")
    b = h.begin_write(0, [("b", 1)])
    h.end_write(b, "ok")
    c = h.begin_write(0, [("c", 1), ("c", 2), ("c", 3)])
    h.end_write(c, "ok")
    d = h.begin_write(1, [("d", 1)])
    h.end_write(d, "ok")
    f = h.begin_write(0, [("f", 1)])
    h.end_write(f, "failed", "rolled back")
    final: dict[int, list[Event]] = {
        0: [
            (ulid(1000, 5, 0), ("a", 1)),
            (ulid(1000, 5, 1), ("a", 2)),
            (ulid(1000, 6, 0), ("b", 1)),
            (ulid(1001, -3, 0), ("c", 1)),  # a new millisecond, a negative low
            (ulid(1001, -3, 1), ("c", 2)),
            (ulid(1001, -3, 2), ("c", 3)),
        ],
        1: [(ulid(1000, 9, 0), ("d", 1))],
    }
    h.record_page("r1", 0, ZERO_ULID, 2, final[0][:3][:2])
    h.record_page("r1", 0, final[0][1][0], 2, final[0][2:3])
    h.record_page("r2", 0, ZERO_ULID, 100, final[0])
    h.record_page("r2", 0, final[0][-1][0], 100, [])
    h.record_page("r3", 0, final[0][2][0], 1, final[0][3:])  # one txn > page_size: whole
    h.record_page("r3", 1, ZERO_ULID, 5, final[1])
    return h, final


def rules_of(h: History, final: dict[int, list[Event]], **kw: bool) -> set[str]:
    with pytest.raises(HistoryViolation) as info:
        check(h, final, **kw)
    return info.value.rules


def test_block_of_handles_negative_lows() -> None:
    assert block_of(ulid(7, -1, 5)) == (ulid(7, 0)[:8], -1)
    assert block_of(ulid(7, 3, BLOCK - 1)) == (ulid(7, 0)[:8], 3)
    assert block_of(ulid(7, 3, BLOCK - 1)) != block_of(ulid(7, 4, 0))


def test_a_good_history_passes() -> None:
    h, final = good_run()
    summary = check(h, final)
    assert summary.events == 7
    assert summary.writes_ok == 4
    assert summary.writes_failed == 1
    assert summary.pages == 6


def test_loss_is_caught() -> None:
    h, final = good_run()
    del final[0][2]  # b's only event
    assert "loss" in rules_of(h, final)


def test_a_lost_event_skipped_by_a_reader_is_caught() -> None:
    """A reader that skipped an event which the final read has: the S1 failure."""
    h, final = good_run()
    h.record_page("r4", 0, ZERO_ULID, 10, [final[0][0], final[0][1], final[0][3]])
    assert "page-diverges" in rules_of(h, final)


def test_duplicate_event_is_caught() -> None:
    h, final = good_run()
    final[0].insert(3, (ulid(1000, 7, 0), ("b", 1)))
    rules = rules_of(h, final)
    assert "duplicate" in rules


def test_duplicate_ulid_is_caught() -> None:
    h, final = good_run()
    x = h.begin_write(1, [("x", 1)])
    h.end_write(x, "ok")
    final[1].append((final[1][0][0], ("x", 1)))
    assert {"duplicate", "order"} <= rules_of(h, final)


def test_reorder_is_caught() -> None:
    h, final = good_run()
    final[0][2], final[0][3] = final[0][3], final[0][2]
    assert "order" in rules_of(h, final)


def test_real_time_reorder_is_caught() -> None:
    """b finished before c started, yet c got smaller ULIDs (a stale allocation)."""
    h, final = good_run()
    ulids = [u for u, _ in final[0]]
    keys = [k for _, k in final[0]]
    # c's three events first, then a, then b: sorted ULIDs, but c committed last.
    reordered = [keys[3], keys[4], keys[5], keys[0], keys[1], keys[2]]
    blocks = [ulid(1000, 1, 0), ulid(1000, 1, 1), ulid(1000, 1, 2)]
    final[0] = list(zip(blocks + ulids[:3], reordered, strict=True))
    h.pages.clear()
    assert rules_of(h, final) == {"real-time"}
    check(h, final, real_time_order=False)  # the rest of the history is fine


def test_split_transaction_is_caught() -> None:
    h, final = good_run()
    # b's event between a's two events, each keeping its own block: not contiguous.
    final[0] = [
        (ulid(1000, 5, 0), ("a", 1)),
        (ulid(1000, 5, 1), ("b", 1)),
        (ulid(1000, 5, 2), ("a", 2)),
        *final[0][3:],
    ]
    h.pages.clear()
    rules = rules_of(h, final)
    assert "split" in rules
    assert "shared-block" in rules


def test_transaction_over_two_blocks_is_caught() -> None:
    h, final = good_run()
    final[0][1] = (ulid(1000, 5, BLOCK), ("a", 2))  # contiguous, but in block 6
    h.pages.clear()
    assert "split" in rules_of(h, final)


def test_two_transactions_sharing_a_block_are_caught() -> None:
    h, final = good_run()
    final[0][2] = (ulid(1000, 5, 7), ("b", 1))
    h.pages.clear()
    assert rules_of(h, final) == {"shared-block"}


def test_failed_write_visible_is_caught() -> None:
    h, final = good_run()
    final[0].append((ulid(1002, 1, 0), ("f", 1)))
    assert "aborted-visible" in rules_of(h, final)


def test_unknown_write_all_or_nothing() -> None:
    h, final = good_run()
    u = h.begin_write(0, [("u", 1), ("u", 2)])
    h.end_write(u, "unknown", "connection died during commit")
    assert check(h, final).writes_unknown_out == 1
    full = [*final[0], (ulid(1003, 2, 0), ("u", 1)), (ulid(1003, 2, 1), ("u", 2))]
    assert check(h, {**final, 0: full}).writes_unknown_in == 1
    half = [*final[0], (ulid(1003, 2, 0), ("u", 1))]
    assert "partial" in rules_of(h, {**final, 0: half})


def test_phantom_and_wrong_shard_are_caught() -> None:
    h, final = good_run()
    final[1].append((ulid(1000, 10, 0), ("zzz", 1)))
    assert "phantom" in rules_of(h, final)
    h, final = good_run()
    final[1].append((ulid(1000, 10, 0), ("b", 1)))  # b was written to shard 0
    assert "phantom" in rules_of(h, final)


def test_page_ending_inside_a_transaction_is_caught() -> None:
    h, final = good_run()
    h.record_page("r5", 0, final[0][2][0], 10, final[0][3:5])  # 2 of c's 3 events
    assert rules_of(h, final) == {"page-boundary"}


def test_oversized_page_is_caught() -> None:
    h, final = good_run()
    h.record_page("r5", 0, ZERO_ULID, 2, final[0][:3])  # a + b in a page of size 2
    assert rules_of(h, final) == {"page-size"}


def test_page_out_of_order_is_caught() -> None:
    h, final = good_run()
    h.record_page("r6", 0, ZERO_ULID, 10, [final[0][1], final[0][0]])
    assert "page-order" in rules_of(h, final)


def test_reader_divergence_is_caught() -> None:
    """A reader that saw a different event (e.g. one later rolled back) at a position."""
    h, final = good_run()
    h.record_page("r7", 1, ZERO_ULID, 10, [(ulid(1000, 9, 0), ("d", 2))])
    assert "page-diverges" in rules_of(h, final)


def test_unstable_reread_is_caught() -> None:
    """C3: the same cursor read twice gives different ULIDs: one read must differ."""
    h, final = good_run()
    h.record_page("r8", 0, final[0][2][0], 10, [(ulid(1001, -2, 0), ("c", 1))])
    assert "page-diverges" in rules_of(h, final)


def test_unfinished_or_reused_history_is_rejected() -> None:
    h, final = good_run()
    h.begin_write(0, [("p", 1)])
    assert rules_of(h, final) == {"history"}
    h, final = good_run()
    h.begin_write(0, [("a", 1)])
    assert "history" in rules_of(h, final, allow_pending=True)
