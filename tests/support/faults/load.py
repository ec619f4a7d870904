"""Concurrent writers and readers in threads, each with its own connection.

psycopg releases the GIL while it waits on the server, so threads give real concurrent
sessions on the server. Every write and page goes into a :class:`History`.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from tests.support.faults.checker import ZERO_ULID, Event, History, Write
from tests.support.faults.feedkit import FeedKit

from changefeed.client import ChangefeedError


@dataclass
class ReaderState:
    name: str
    cursors: dict[int, bytes] = field(default_factory=dict)
    seen: dict[int, list[Event]] = field(default_factory=dict)


def write_once(
    kit: FeedKit,
    conn: psycopg.Connection[Any],
    history: History,
    shard: int,
    keys: list[Any],
    **kwargs: Any,
) -> bool:
    """One recorded write; ``True`` if it committed (see :func:`record_write`)."""
    return record_write(kit, conn, history, shard, keys, **kwargs).outcome == "ok"


def record_write(
    kit: FeedKit,
    conn: psycopg.Connection[Any],
    history: History,
    shard: int,
    keys: list[Any],
    **kwargs: Any,
) -> Write:
    """One recorded write; returns its record. A refusal by the server (an abandoned or
    burned write, a constraint) is a ``failed`` write; other errors propagate."""
    write = history.begin_write(shard, keys)
    try:
        kit.write(conn, shard, keys, **kwargs)
    except (psycopg.Error, ChangefeedError) as exc:
        # The commit never happened if the connection is still usable: it rolled back.
        outcome = "unknown" if (conn.closed or conn.broken) else "failed"
        history.end_write(write, outcome, f"{type(exc).__name__} {exc.sqlstate}: {exc}")
        return write
    except BaseException as exc:
        history.end_write(write, "unknown", repr(exc))
        raise
    history.end_write(write, "ok")
    return write


def read_page(
    kit: FeedKit,
    conn: psycopg.Connection[Any],
    history: History,
    reader: ReaderState,
    shard: int,
    page_size: int,
) -> list[Event]:
    cursor = reader.cursors.get(shard, ZERO_ULID)
    started = time.monotonic()
    page = kit.read_page(conn, shard, cursor, page_size)
    history.record_page(reader.name, shard, cursor, page_size, page, started=started)
    if page:
        reader.cursors[shard] = page[-1][0]
        reader.seen.setdefault(shard, []).extend(page)
    return page


def catch_up(
    kit: FeedKit,
    conn: psycopg.Connection[Any],
    history: History,
    reader: ReaderState,
    shards: list[int],
    page_size: int = 500,
    timeout_s: float = 30.0,
) -> None:
    """Read every shard to its end, once no writer is running any more.

    An empty page alone does not prove the end: in outbox mode a concurrent reader may
    have moved the last rows while this one's move found nothing (see
    ``test_reader_faults.py``). So after an empty page, move the outbox (a reader may;
    it waits for any mover still at work) and read once more.
    """
    deadline = time.monotonic() + timeout_s
    for shard in shards:
        while True:
            if read_page(kit, conn, history, reader, shard, page_size):
                continue
            kit.move_outbox(conn, shard)
            if not read_page(kit, conn, history, reader, shard, page_size):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{reader.name} could not catch up on shard {shard}")


@dataclass
class LoadResult:
    history: History
    readers: list[ReaderState]
    writes_per_writer: list[int]
    errors: list[BaseException]
    seconds: float
    splits: list[dict[str, Any]] = field(default_factory=list)


def run_load(
    kit: FeedKit,
    connect: Callable[..., psycopg.Connection[Any]],
    *,
    shards: list[int],
    writers: int,
    writes_per_writer: int,
    readers: int,
    rows: tuple[int, int] = (1, 4),
    max_page: int = 40,
    seed: int = 0,
    deadline_s: float = 60.0,
    writer_shard: Callable[[int, random.Random], int] | None = None,
    key: Callable[[int], Any] = lambda n: n,
    until: threading.Event | None = None,
    reader_connect: Callable[..., psycopg.Connection[Any]] | None = None,
    commit_delay_s: float | None = None,
) -> LoadResult:
    """Run writers and readers together, then let every reader catch up to the end.

    Each writer makes ``writes_per_writer`` writes, or with ``until`` keeps writing until
    that event is set. ``key`` maps a unique number to a key of the feed. With
    ``commit_delay_s`` (blocking mode) every write pauses up to that long between
    update_state and COMMIT (:meth:`FeedKit.write`); the times land in ``splits``.
    """
    history = History()
    errors: list[BaseException] = []
    splits: list[dict[str, Any]] = []
    done = threading.Event()
    counts = [0] * writers
    reader_states = [ReaderState(f"r{i}") for i in range(readers)]
    deadline = time.monotonic() + deadline_s
    start_gate = threading.Barrier(writers + readers)

    def writer(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        try:
            conn = connect()
            start_gate.wait()
            n = 0
            while (n < writes_per_writer) if until is None else not until.is_set():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"writer {i} passed the deadline at write {n}")
                shard = writer_shard(i, rng) if writer_shard else rng.choice(shards)
                size = rng.randint(rows[0], rows[1])
                keys = [key(i * 10_000_000 + n * 100 + j) for j in range(size)]
                extra: dict[str, Any] = {}
                if commit_delay_s is not None:
                    extra = {"commit_delay_s": rng.uniform(0, commit_delay_s),
                             "step": lambda name, **data: splits.append(data)}  # fmt: skip
                if write_once(kit, conn, history, shard, keys, **extra):
                    counts[i] += 1
                n += 1
        except BaseException as exc:
            errors.append(exc)

    def reader(state: ReaderState, i: int) -> None:
        rng = random.Random(seed * 1000 + 500 + i)
        try:
            conn = (reader_connect or connect)()
            start_gate.wait()
            while not done.is_set() and time.monotonic() < deadline:
                read_page(kit, conn, history, state, rng.choice(shards), rng.randint(1, max_page))
            catch_up(kit, conn, history, state, shards, page_size=rng.randint(1, max_page))
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    wthreads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    rthreads = [threading.Thread(target=reader, args=(s, i)) for i, s in enumerate(reader_states)]
    for t in wthreads + rthreads:
        t.start()
    for t in wthreads:
        t.join()
    done.set()
    for t in rthreads:
        t.join()
    return LoadResult(
        history=history,
        readers=reader_states,
        writes_per_writer=counts,
        errors=errors,
        seconds=time.monotonic() - started,
        splits=splits,
    )


class ThreadWrite:
    """One recorded write in its own thread that can stop after a step until released.

    ``hold`` names a step of :meth:`FeedKit.write` (``locked``, ``inserted``,
    ``committing``); :attr:`steps` holds the monotonic time and data of every step
    reached, and :attr:`ok` / :attr:`error` how the write ended.
    """

    def __init__(
        self,
        kit: FeedKit,
        conn: psycopg.Connection[Any],
        history: History,
        shard: int,
        keys: list[Any],
        hold: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.steps: dict[str, tuple[float, dict[str, Any]]] = {}
        self.hold = hold
        self.go = threading.Event()
        self.started = time.monotonic()
        self.ok: bool | None = None
        self.error: BaseException | None = None
        self.record: Write | None = None
        self._reached = threading.Condition()

        def step(name: str, **data: Any) -> None:
            with self._reached:
                self.steps[name] = (time.monotonic(), data)
                self._reached.notify_all()
            if name == self.hold and not self.go.wait(60):
                raise TimeoutError(f"held at {name} for 60 s")

        def run() -> None:
            try:
                self.record = record_write(kit, conn, history, shard, keys, step=step, **kwargs)
                self.ok = self.record.outcome == "ok"
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait_for(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        with self._reached:
            if not self._reached.wait_for(
                lambda: name in self.steps or not self.thread.is_alive(), timeout
            ):
                raise AssertionError(f"write did not reach {name} within {timeout} s")
        if name not in self.steps:
            raise AssertionError(f"write ended before {name}: ok={self.ok} error={self.error!r}")
        return self.steps[name][1]

    def seconds_to(self, name: str) -> float:
        return self.steps[name][0] - self.started

    def release(self) -> None:
        self.go.set()

    def join(self, timeout: float = 30.0) -> bool:
        self.go.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"write still running after {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.ok is not None
        return self.ok
