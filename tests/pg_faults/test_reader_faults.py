"""Readers and movers that die half-way.

* a reader process SIGKILLed while it reads a large page (and, in outbox mode, while its
  ``read_page`` moves the outbox): it never got its page, so its cursor never moved;
  nothing is lost or duplicated (O1) and re-reading from the same cursor gives
  identical ULIDs (C3);
* ``pg_terminate_backend`` of a mover in the middle of ``move_outbox``: the move is
  all or nothing (nothing published, every outbox row still there), and the next move
  publishes each row exactly once (O1, O2);
* a mover process SIGKILLed in the middle of ``move_outbox``: the server finishes or
  undoes the move as one transaction; either way exactly once;
* two readers at the head of an outbox feed at once (``read_page`` after a concurrent
  move).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from tests.support.faults.checker import ZERO_ULID, History, check
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import write_once
from tests.support.faults.procs import Child, wait_until

pytestmark = pytest.mark.postgres


def backend_running(admin: psycopg.Connection[Any], pid: int, like: str) -> bool:
    row = admin.execute(
        "select 1 from pg_stat_activity where pid = %s and state = 'active' and query like %s",
        [pid, like],
    ).fetchone()
    return row is not None


def wait_backend_gone(admin: psycopg.Connection[Any], pid: int) -> None:
    """Wait until the backend of a killed client has ended: the server finishes or rolls
    back its statement on its own, and until then holds its locks (a reader that meets the
    mover lock of an outbox feed held longer than its wait moves nothing, and its page can
    be empty: nothing yet, not nothing lost)."""
    wait_until(
        lambda: (
            admin.execute("select 1 from pg_stat_activity where pid = %s", [pid]).fetchone() is None
        ),
        30,
        0.01,
        "the killed client's backend to exit",
    )


def got_page(child: Child) -> bool:
    """Whether the child's page has come back."""
    return any(e["ev"] == "page" for e in list(child.events.queue))


def fill(
    kit: FeedKit, conn: psycopg.Connection[Any], history: History, txns: int, rows: int
) -> None:
    for t in range(txns):
        keys = [t * 1_000_000 + j for j in range(rows)]
        assert write_once(kit, conn, history, 0, keys, source=False)


def read_everything(
    kit: FeedKit, conn: psycopg.Connection[Any], history: History, name: str, page_size: int
) -> list[bytes]:
    cursor, ulids = ZERO_ULID, []
    while True:
        page = kit.read_raw(conn, 0, cursor, page_size)
        history.record_page(name, 0, cursor, page_size, page)
        if not page:
            return ulids
        ulids += [u for u, _ in page]
        cursor = page[-1][0]


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_reader_killed_mid_page(
    make_feed: MakeFeed,
    connect: Connections,
    admin: psycopg.Connection[Any],
    pg_uri: str,
    mode: str,
) -> None:
    kit = make_feed(mode)
    history = History()
    conn = connect()
    fill(kit, conn, history, txns=6, rows=5000)  # in outbox mode: all still in the outbox
    like = "%move_outbox%" if mode == "outbox" else "%read_feed%"
    # A blocking read changes nothing, so a read that returned before the poll saw it (a
    # busy machine can hold the poll back longer than the read takes) is simply tried
    # again. An outbox read moves the outbox, which takes long enough: one attempt.
    attempts = 5 if mode == "blocking" else 1
    for _ in range(attempts):
        with Child(pg_uri, kit.to_json(), "reader") as child:
            child.send("read", shard=0, cursor=ZERO_ULID.hex(), page_size=25_000)
            wait_until(
                lambda: got_page(child) or backend_running(admin, child.backend_pid, like),
                10,
                0.001,
                like,
            )
            child.kill()
            killed_mid_page = not got_page(child)
        if killed_mid_page:
            break
    assert killed_mid_page, f"killed too late: the page came back first, {attempts} times"
    wait_backend_gone(admin, child.backend_pid)
    # The reader never got its page: whatever it was doing is either done or undone.
    first = read_everything(kit, connect(), history, "again-1", 7000)
    second = read_everything(kit, connect(), history, "again-2", 12_000)
    kit.final(admin)  # moves whatever is left
    third = read_everything(kit, connect(), history, "again-3", 7000)
    summary = check(history, kit.final(admin))
    assert summary.events == 30_000
    if mode == "blocking":
        assert first == second == third  # C3: the same cursor, the same ULIDs
    else:
        assert first == second and third[: len(first)] == first


def _big_outbox(kit: FeedKit, conn: psycopg.Connection[Any], history: History) -> None:
    # The big transaction first, so that the first move takes it (whole) and is long.
    assert write_once(kit, conn, history, 0, list(range(100, 80_100)), source=False)
    assert write_once(kit, conn, history, 0, [1, 2], source=False)
    assert write_once(kit, conn, history, 0, [3], source=False)


def _feed_count(kit: FeedKit, conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(psycopg.sql.SQL("select count(*) from {}").format(kit.q("feed"))).fetchone()
    assert row is not None
    return int(row[0])


def test_mover_terminated_mid_move(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    kit = make_feed("outbox")
    history = History()
    _big_outbox(kit, connect(), history)
    interrupted = False
    for _ in range(3):  # the move must still be running when it is terminated
        with Child(pg_uri, kit.to_json(), "mover") as child:
            child.send("move", shard=0)
            child.expect("moving")
            wait_until(
                lambda: backend_running(admin, child.backend_pid, "%move_outbox%"),
                10,
                0.001,
            )
            time.sleep(0.05)
            admin.execute("select pg_terminate_backend(%s)", [child.backend_pid])
            event = child.next_event()
            if event["ev"] == "error":
                assert event["broken"], event
                interrupted = True
                # All or nothing: nothing was published, nothing left the outbox.
                assert _feed_count(kit, admin) == 0
                assert kit.outbox_count(admin) == 80_003
                break
            assert event["ev"] == "moved", event
    assert interrupted, "move_outbox finished before it could be terminated"
    reader_history = History()
    kit.final(admin)  # the next mover moves everything, once
    assert kit.outbox_count(admin) == 0
    before = read_everything(kit, connect(), reader_history, "r1", 1000)
    after = read_everything(kit, connect(), reader_history, "r2", 50)
    assert before == after
    history.pages.extend(reader_history.pages)
    summary = check(history, kit.final(admin))
    assert summary.events == 80_003


def test_mover_process_killed_mid_move(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    kit = make_feed("outbox")
    history = History()
    _big_outbox(kit, connect(), history)
    with Child(pg_uri, kit.to_json(), "mover") as child:
        child.send("move", shard=0)
        child.expect("moving")
        wait_until(lambda: backend_running(admin, child.backend_pid, "%move_outbox%"), 10, 0.001)
        child.kill()
    wait_backend_gone(admin, child.backend_pid)
    # One move of max_rows 10000 takes the first transaction, whole (protocol 5, step 1:
    # no window of rows holds a whole transaction until it holds the first one's 80,000).
    state = (_feed_count(kit, admin), kit.outbox_count(admin))
    assert state in ((0, 80_003), (80_000, 3)), state
    kit.final(admin)
    summary = check(history, kit.final(admin))
    assert summary.events == 80_003


def test_read_page_after_a_concurrent_move(
    make_feed: MakeFeed, connect: Connections, admin: psycopg.Connection[Any]
) -> None:
    """Reader B calls read_page while reader A is moving the outbox. B's own move waits
    for A's mover lock, then finds nothing left to move. The event was committed before
    B's call and is in the feed before B's call returns, so B's page must hold it.
    (Until a68abc8 the client re-read only if its own move moved rows, and returned a
    stale empty page here.)
    """
    kit = make_feed("outbox")
    history = History()
    assert write_once(kit, connect(), history, 0, [1])
    mover = connect()
    mover.execute("begin")
    assert kit.move_outbox(mover, 0) == 1  # holds the mover lock until commit
    bconn = connect()
    pages: list[list[Any]] = []
    reader = threading.Thread(target=lambda: pages.append(kit.read_page(bconn, 0, ZERO_ULID, 10)))
    reader.start()
    wait_until(
        lambda: (
            admin.execute(
                "select 1 from pg_locks where pid = %s and not granted", [bconn.info.backend_pid]
            ).fetchone()
            is not None
        ),
        10,
        0.001,
        "B to wait for the mover lock",
    )
    mover.execute("commit")
    reader.join(10)
    assert [k for _, k in pages[0]] == [1], "read_page returned a stale page"
