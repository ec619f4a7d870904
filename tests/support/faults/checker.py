"""A history recorder and an offline checker for changefeed runs.

The fault scenarios record what every client *did* (write attempts with the keys they
wrote and how they ended, pages that readers got) and what the feed finally holds, then
:func:`check` decides whether the run kept the protocol's promises
(``docs/protocol.md``):

* **no loss**: every key of an ``ok`` write is in the final feed exactly once (C1, O1);
* **no phantom / aborted data**: every event belongs to a write that was attempted on
  that shard, and no event of a ``failed`` write is visible (B2, S3);
* **atomicity of unknown outcomes**: a write whose fate the client cannot know (its
  connection died during commit) is in the feed with all of its keys or with none;
* **order**: ULIDs are unique and strictly increasing in read order per shard (A1), and a
  write that finished before another one started has smaller ULIDs (A1, real time);
* **blocks**: the events of one transaction are contiguous and share one block
  ``(ulid_high, ulid_low >> 36)``, and no two transactions share a block (A1, O2);
* **readers agree**: every page is exactly the slice of the final sequence that follows
  its cursor, so every reader saw a prefix of the same sequence, nothing was skipped
  (S1, C3), pages end at transaction boundaries and exceed ``page_size`` only to return
  one whole transaction (section 8, C2).

The checker is deliberately independent of the implementation: it only needs bytes
and keys. ``tests/pg_faults/test_checker.py`` feeds it hand-made bad histories to show
that each rule catches what it claims to.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

BLOCK_BITS = 36
ZERO_ULID = bytes(16)

Outcome = Literal["ok", "failed", "unknown", "pending"]
Key = Hashable
Event = tuple[bytes, Key]


def block_of(ulid: bytes) -> tuple[bytes, int]:
    """The block ``(ulid_high, ulid_low >> 36)`` of a 16-byte ULID (protocol section 3)."""
    if len(ulid) != 16:
        raise ValueError(f"a ULID has 16 bytes, got {len(ulid)}")
    low = int.from_bytes(ulid[8:], "big", signed=True)
    return (bytes(ulid[:8]), low >> BLOCK_BITS)


@dataclass
class Write:
    """One write attempt: one source transaction on one shard."""

    wid: str
    shard: int
    keys: tuple[Key, ...]
    started: float
    outcome: Outcome = "pending"
    finished: float | None = None
    detail: str = ""


@dataclass
class Page:
    """One page a reader got: the events after ``cursor``, in the order returned."""

    reader: str
    shard: int
    cursor: bytes
    page_size: int
    events: tuple[Event, ...]
    started: float = 0.0
    finished: float = 0.0


@dataclass
class History:
    """Thread-safe log of write attempts and pages."""

    writes: dict[str, Write] = field(default_factory=dict)
    pages: list[Page] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _counter: int = 0

    def begin_write(self, shard: int, keys: Iterable[Key], wid: str | None = None) -> Write:
        with self._lock:
            self._counter += 1
            wid = wid if wid is not None else f"w{self._counter}"
            if wid in self.writes:
                raise ValueError(f"write id {wid!r} recorded twice")
            write = Write(wid=wid, shard=shard, keys=tuple(keys), started=time.monotonic())
            self.writes[wid] = write
            return write

    def end_write(self, write: Write, outcome: Outcome, detail: str = "") -> None:
        with self._lock:
            write.outcome = outcome
            write.finished = time.monotonic()
            write.detail = detail

    def record_page(
        self,
        reader: str,
        shard: int,
        cursor: bytes,
        page_size: int,
        events: Iterable[Event],
        started: float = 0.0,
    ) -> Page:
        page = Page(
            reader=reader,
            shard=shard,
            cursor=bytes(cursor),
            page_size=page_size,
            events=tuple((bytes(u), k) for u, k in events),
            started=started,
            finished=time.monotonic(),
        )
        with self._lock:
            self.pages.append(page)
        return page

    def count(self, outcome: Outcome) -> int:
        return sum(1 for w in self.writes.values() if w.outcome == outcome)


class HistoryViolation(AssertionError):
    """The run broke an invariant; ``violations`` lists ``(rule, message)``."""

    def __init__(self, violations: Sequence[tuple[str, str]]) -> None:
        self.violations = list(violations)
        rules = Counter(rule for rule, _ in violations)
        shown = "\n".join(f"  [{rule}] {msg}" for rule, msg in violations[:25])
        more = f"\n  ... and {len(violations) - 25} more" if len(violations) > 25 else ""
        super().__init__(f"{len(violations)} invariant violation(s) {dict(rules)}:\n{shown}{more}")

    @property
    def rules(self) -> set[str]:
        return {rule for rule, _ in self.violations}


@dataclass
class Summary:
    """What a passing check saw (for scenario assertions and reports)."""

    events: int
    writes_ok: int
    writes_failed: int
    writes_unknown_in: int
    writes_unknown_out: int
    pages: int
    page_events: int


def check(
    history: History,
    final: dict[int, Sequence[Event]],
    *,
    real_time_order: bool = True,
    allow_pending: bool = False,
) -> Summary:
    """Check a finished run; raise :class:`HistoryViolation` listing every broken rule.

    ``final`` is the complete feed per shard *in the order it was read*; read it after
    every writer has stopped and (outbox mode) the outbox has been moved.
    """
    bad: list[tuple[str, str]] = []
    writes = history.writes

    # --- the history itself must be usable -------------------------------------------
    owner: dict[Key, Write] = {}
    for w in writes.values():
        if w.outcome == "pending" and not allow_pending:
            bad.append(("history", f"write {w.wid} never ended (outcome still pending)"))
        for k in w.keys:
            if k in owner:
                bad.append(("history", f"key {k!r} written by both {owner[k].wid} and {w.wid}"))
            owner[k] = w
    if bad:
        raise HistoryViolation(bad)

    # --- the final feed: order, uniqueness, provenance -------------------------------
    seen_keys: Counter[Key] = Counter()
    seen_ulids: Counter[tuple[int, bytes]] = Counter()
    where: dict[Key, tuple[int, int]] = {}  # key -> (shard, index)
    for shard, events in final.items():
        prev: bytes | None = None
        for i, (u, k) in enumerate(events):
            u = bytes(u)
            if len(u) != 16:
                bad.append(("shape", f"shard {shard} event {i}: ULID of {len(u)} bytes"))
                continue
            seen_ulids[(shard, u)] += 1
            seen_keys[k] += 1
            where.setdefault(k, (shard, i))
            if prev is not None and not prev < u:
                bad.append(
                    (
                        "order",
                        f"shard {shard}: event {i} {u.hex()} (key {k!r}) is not above "
                        f"the previous {prev.hex()}",
                    )
                )
            prev = u
            w = owner.get(k)
            if w is None:
                bad.append(("phantom", f"shard {shard}: key {k!r} was never written"))
            elif w.shard != shard:
                bad.append(
                    ("phantom", f"key {k!r} of {w.wid} (shard {w.shard}) appears in shard {shard}")
                )
    for (shard, u), n in seen_ulids.items():
        if n > 1:
            bad.append(("duplicate", f"shard {shard}: ULID {u.hex()} appears {n} times"))
    for k, n in seen_keys.items():
        if n > 1:
            bad.append(("duplicate", f"key {k!r} appears {n} times"))

    # --- outcomes: ok = all once, failed = none, unknown = all or none ---------------
    unknown_in = unknown_out = 0
    for w in writes.values():
        present = [k for k in w.keys if seen_keys[k] > 0]
        if w.outcome == "ok":
            missing = [k for k in w.keys if seen_keys[k] == 0]
            if missing:
                bad.append(
                    (
                        "loss",
                        f"ok write {w.wid} (shard {w.shard}) lost {len(missing)} of "
                        f"{len(w.keys)} events, e.g. {missing[:3]!r}",
                    )
                )
        elif w.outcome == "failed":
            if present:
                bad.append(
                    (
                        "aborted-visible",
                        f"failed write {w.wid} ({w.detail}) has {len(present)} visible "
                        f"events, e.g. {present[:3]!r}",
                    )
                )
        elif w.outcome in ("unknown", "pending"):
            if present and len(present) != len(w.keys):
                bad.append(
                    (
                        "partial",
                        f"{w.outcome} write {w.wid} is partly visible: "
                        f"{len(present)} of {len(w.keys)} events",
                    )
                )
            elif present:
                unknown_in += 1
            else:
                unknown_out += 1

    # --- blocks: one transaction = one contiguous run = one block --------------------
    block_owner: dict[tuple[int, bytes, int], str] = {}
    spans: dict[str, tuple[int, int, int]] = {}  # wid -> (shard, first index, last index)
    for w in writes.values():
        idx = sorted(where[k][1] for k in w.keys if k in where and where[k][0] == w.shard)
        if not idx:
            continue
        events = final[w.shard]
        if idx[-1] - idx[0] + 1 != len(idx):
            intruders = sorted(
                {
                    owner[events[j][1]].wid if events[j][1] in owner else repr(events[j][1])
                    for j in range(idx[0], idx[-1] + 1)
                    if owner.get(events[j][1]) is not w
                }
            )
            bad.append(
                (
                    "split",
                    f"write {w.wid} (shard {w.shard}) is not contiguous: its events span "
                    f"positions {idx[0]}..{idx[-1]} with {intruders[:5]} in between",
                )
            )
        blocks = {block_of(bytes(events[j][0])) for j in idx}
        if len(blocks) != 1:
            bad.append(("split", f"write {w.wid} spans {len(blocks)} blocks"))
        for b in blocks:
            other = block_owner.setdefault((w.shard, *b), w.wid)
            if other != w.wid:
                bad.append(
                    ("shared-block", f"writes {other} and {w.wid} share block {b[0].hex()}/{b[1]}")
                )
        spans[w.wid] = (w.shard, idx[0], idx[-1])

    # --- real-time order: finished before started => smaller ULIDs -------------------
    if real_time_order:
        by_shard: dict[int, list[Write]] = defaultdict(list)
        for w in writes.values():
            if w.wid in spans:
                by_shard[w.shard].append(w)
        for shard, ws in by_shard.items():
            # Sort by start; for each write, every write that finished before it started
            # must sit before it. Keep the running max end position of those finished.
            ends = sorted(
                (w.finished, spans[w.wid][2], w.wid)
                for w in ws
                if w.outcome == "ok" and w.finished is not None
            )
            end_times = [e[0] for e in ends]
            prefix_max: list[tuple[int, str]] = []
            best: tuple[int, str] = (-1, "")
            for _, last, wid in ends:
                best = max(best, (last, wid))
                prefix_max.append(best)
            for w in ws:
                n = bisect.bisect_left(end_times, w.started)
                if n == 0:
                    continue
                last, wid = prefix_max[n - 1]
                if last >= spans[w.wid][1]:
                    bad.append(
                        (
                            "real-time",
                            f"shard {shard}: {wid} finished before {w.wid} started, but "
                            f"{w.wid} has a smaller ULID",
                        )
                    )

    # --- pages: each is the exact slice after its cursor, ending at a boundary -------
    index = {shard: [bytes(u) for u, _ in events] for shard, events in final.items()}
    txn_end: dict[int, set[int]] = {}
    for shard, events in final.items():
        ends_here: set[int] = set()
        for i in range(len(events)):
            if i + 1 == len(events) or block_of(bytes(events[i][0])) != block_of(
                bytes(events[i + 1][0])
            ):
                ends_here.add(i)
        txn_end[shard] = ends_here
    page_events = 0
    for p in history.pages:
        page_events += len(p.events)
        ulids = index.get(p.shard, [])
        shard_events = final.get(p.shard, [])
        start = bisect.bisect_right(ulids, p.cursor)
        expected = shard_events[start : start + len(p.events)]
        got = list(p.events)
        where_p = f"reader {p.reader} shard {p.shard} cursor {p.cursor.hex()}"
        for i in range(1, len(got)):
            if not got[i - 1][0] < got[i][0]:
                bad.append(("page-order", f"{where_p}: event {i} is not above event {i - 1}"))
                break
        if [(bytes(u), k) for u, k in expected] != got:
            first = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(expected, got, strict=False))
                    if (bytes(a[0]), a[1]) != b
                ),
                min(len(expected), len(got)),
            )
            exp = expected[first] if first < len(expected) else None
            gotten = got[first] if first < len(got) else None
            bad.append(
                (
                    "page-diverges",
                    f"{where_p}: page of {len(got)} differs from the final sequence at "
                    f"position {first}: expected {_fmt(exp)}, got {_fmt(gotten)}",
                )
            )
            continue
        if got:
            last = start + len(got) - 1
            if last not in txn_end[p.shard]:
                bad.append(("page-boundary", f"{where_p}: page ends inside a transaction"))
            if len(got) > p.page_size and block_of(got[0][0]) != block_of(got[-1][0]):
                bad.append(
                    (
                        "page-size",
                        f"{where_p}: {len(got)} events > page_size {p.page_size} "
                        "and the page holds more than one transaction",
                    )
                )

    if bad:
        raise HistoryViolation(bad)
    return Summary(
        events=sum(len(e) for e in final.values()),
        writes_ok=history.count("ok"),
        writes_failed=history.count("failed"),
        writes_unknown_in=unknown_in,
        writes_unknown_out=unknown_out,
        pages=len(history.pages),
        page_events=page_events,
    )


def _fmt(event: Event | None) -> str:
    if event is None:
        return "nothing"
    return f"{bytes(event[0]).hex()} key {event[1]!r}"
