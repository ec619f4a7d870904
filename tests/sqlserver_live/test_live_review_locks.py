"""Review items about locks and plans that only a server shows (docs/sqlserver.md,
"Review of the generated T-SQL"): the barrier's mover lock is given back by an
interrupted call (#17), a burn marks a holder whose lock call was still committing (#18),
shards() finds the outbox's shards (#27), ulid() is schema-bound (#28) and the outbox key
is optimized for sequential inserts where the server has the option (#29)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pymssql
import pytest
from tests.support.sqlserver_live import BLOCK, LiveFeed, Server, Threads, lit, run, scalar


def _application_locks(conn: Any, spid: int) -> int:
    return int(scalar(conn, "select count(*) from sys.dm_tran_locks where resource_type = "
                            f"N'APPLICATION' and request_session_id = {spid};"))  # fmt: skip


def test_an_interrupted_barrier_check_gives_the_mover_lock_back(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """#17: barrier_check holds the shard's mover lock while it looks at the outbox. A
    table lock on the outbox (as lock escalation used to take) makes that look wait, and
    the client's timeout interrupts the call there; the lock must not stay with the
    connection (it did, session-owned)."""
    feed: LiveFeed = fresh("outbox_int")
    barrier = feed.client.barrier_acquire(conn, 0)
    with mssql.connection() as blocker, mssql.connection(timeout=3) as caller:
        spid = int(scalar(caller, "select @@spid;"))
        run(blocker, f"begin transaction; select count(*) from {feed.obj('outbox')} "
                     "with (tablockx, holdlock);")  # fmt: skip
        try:
            with pytest.raises(pymssql.Error):
                feed.client.barrier_check(caller, barrier)
        finally:
            run(blocker, "rollback;")
        alive = f"select count(*) from sys.dm_exec_sessions where session_id = {spid};"
        if not scalar(conn, alive):
            pytest.skip("the client library ended the session on its timeout: no lock to check")
        # the session lives on (a pooled connection would be reused), and holds no
        # application lock: the rollback gave the mover lock back
        assert _application_locks(conn, spid) == 0
    assert feed.client.barrier_check(conn, barrier) is True


def test_a_burn_marks_a_holder_whose_lock_call_was_still_committing(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """#18: a holder inside its lock call's short transaction (its new state and pending
    session uncommitted) for longer than stall_timeout_ms looks stalled in both dirty
    samples. The burn must wait for that transaction and mark its session abandoned;
    skipping the locked row (readpast) left a live holder beside the next generation's."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    state = feed.state(conn, 0)
    assert state is not None
    name = f"changefeed/shop.orders/0/{state['generation']}"
    with mssql.connection() as holder, mssql.connection(timeout=60) as waiter:
        spid = int(scalar(holder, "select @@spid;"))
        # What lock() does up to its commit (protocol 4.3), then a pause before the commit.
        run(holder, f"exec sp_getapplock @Resource = {lit(name)}, @LockMode = N'Exclusive', "
                    "@LockOwner = N'Session', @DbPrincipal = N'public';")  # fmt: skip
        run(
            holder,
            "begin transaction;\n"
            f"update {feed.obj('state')} set ulid_low = ulid_low + {BLOCK} where shard_id = 0;\n"
            f"delete from {feed.obj('session')} where shard_id = 0 and session_id = @@spid;\n"
            f"insert into {feed.obj('session')} (shard_id, session_id, write_id, state, "
            "generation, time, ulid_high, block_start, first_ulid, expected_time, "
            "expected_ulid_high, expected_ulid_low, started_at)\n"
            "select 0, @@spid, newid(), 0, generation, time, ulid_high, ulid_low, "
            "convert(binary(16), ulid_high + convert(binary(8), ulid_low)), time, ulid_high, "
            f"ulid_low, sysutcdatetime() from {feed.obj('state')} where shard_id = 0;",
        )
        locked: list[Any] = []
        threads = Threads()
        threads.start(lambda: locked.append(
            feed.lock(waiter, 0, stall_timeout_ms=1500, lock_probe_ms=20)))  # fmt: skip
        time.sleep(4)  # past both samples: the burn now waits for the holder's commit
        run(holder, "commit;")
        threads.join(60)
        row = run(conn, f"select state, end_reason from {feed.obj('session')} "
                        f"where shard_id = 0 and session_id = {spid};")  # fmt: skip
        assert row == [(2, "stall")]
        [incident] = feed.incidents(conn, 0)
        assert incident["holder_session_id"] == spid
        assert len(locked) == 1
        run(waiter, "begin transaction;\n" + feed.publish_sql())


def test_shards_lists_state_and_outbox_shards_without_waiting(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """#27: the outbox's shards by one seek each; an uncommitted row is skipped, not
    waited for."""
    feed: LiveFeed = fresh("outbox_int")
    for shard, key in ((3, 1), (7, 2), (7, 3), (11, 4), (-5, 5)):
        feed.outbox_insert(conn, shard, [[key]])
    feed.client.read_page(conn, 3)  # moves shard 3: a state row, no outbox row left
    with mssql.connection() as late, mssql.connection(timeout=10) as reader:
        run(late, f"begin transaction; insert into {feed.obj('outbox')} (shard_id, "
                  f"{feed.keys_sql}) values (20, 6);")  # fmt: skip
        try:
            assert feed.client.shards(reader) == [-5, 3, 7, 11]
        finally:
            run(late, "rollback;")


def test_ulid_is_schema_bound(fresh: Any, conn: Any) -> None:
    """#28: SQL Server treats a schema-bound function that reads no table as reading no
    data (parallel plans, no Halloween spool)."""
    feed: LiveFeed = fresh("blocking_int")
    ulid = lit(feed.obj("ulid"))
    assert scalar(conn, f"select objectproperty(object_id({ulid}), 'IsSchemaBound');") == 1
    assert scalar(conn, f"select objectproperty(object_id({ulid}), 'UserDataAccess');") == 0
    hint = dt.datetime(2024, 1, 1)
    assert feed.write(conn, 0, [[1], [2]], hint).first_ulid[:6] != bytes(6)


def test_the_outbox_key_is_optimized_for_sequential_keys_where_available(
    fresh: Any, conn: Any
) -> None:
    """#29: from SQL Server 2019 and on Azure SQL; older servers set the feed up without."""
    feed: LiveFeed = fresh("outbox_int")
    major = int(scalar(conn, "select convert(int, serverproperty('ProductMajorVersion'));"))
    edition = int(scalar(conn, "select convert(int, serverproperty('EngineEdition'));"))
    if major < 15 and edition not in (5, 8):
        assert scalar(conn, f"select object_id({lit(feed.obj('outbox'))});") is not None
        return
    outbox = lit(feed.obj("outbox"))
    flag = scalar(conn, "select optimize_for_sequential_key from sys.indexes where object_id = "
                        f"object_id({outbox}) and is_primary_key = 1;")  # fmt: skip
    assert flag in (True, 1)
