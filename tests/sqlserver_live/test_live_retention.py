"""Retention on a real SQL Server (protocol 8.1, docs/sqlserver.md "Retention"): retain
by age and by count, never past a registered cursor unless overridden, the horizon and
error 51062 for a reader or a save_cursor below it, the reader role's rights, and a feed
registered before retention getting it from setup. Never run yet (no server here)."""

from __future__ import annotations

import datetime as dt
import json
from datetime import timedelta
from typing import Any

import pytest
from tests.support.sqlserver_live import LiveFeed, Server, expect_error, lit, q, run, scalar

from changefeed.client import FellBehindRetention, InvalidArgument

OLD = dt.datetime(2020, 1, 1, 12, 0)
DENIED = 229


def _history(feed: LiveFeed, conn: Any) -> list[bytes]:
    """Three old transactions (2020, two events, one, one) and one of now (one event):
    the events' ULIDs in order."""
    feed.write(conn, 0, [[1], [2]], OLD)
    feed.write(conn, 0, [[3]], OLD + timedelta(minutes=1))
    feed.write(conn, 0, [[4]], OLD + timedelta(minutes=2))
    feed.write(conn, 0, [[5]])
    return [e.ulid for e in feed.read_all(conn, 0)]


def test_retain_by_age_keeps_what_a_registered_consumer_has_not_read(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    ulids = _history(feed, conn)
    assert len(ulids) == 5
    feed.client.save_cursor(conn, "lake", 0, ulids[1])  # has read the first transaction
    [done] = feed.client.retain(conn, max_age=timedelta(days=1))
    assert (done.shard_id, done.removed, done.held_for_consumers) == (0, 2, 2)
    assert done.horizon == ulids[1] and done.slowest_consumer == "lake"
    assert feed.client.retention_horizon(conn, 0) == ulids[1]
    # the consumer reads on from its cursor; a reader from the start fails, naming both
    assert [e.key[0] for e in feed.read_all(conn, 0, ulids[1])] == [3, 4, 5]
    with pytest.raises(FellBehindRetention) as behind:
        feed.client.read_page(conn, 0, bytes(16))
    message = str(behind.value)
    assert "51062" in message and "fell behind retention" in message
    assert ulids[1].hex() in message and "Re-snapshot" in message
    with pytest.raises(FellBehindRetention):
        feed.client.save_cursor(conn, "late", 0, ulids[0])
    # overriding removes what the consumer has not read: the consumer now fails too
    [done] = feed.client.retain(conn, max_age=timedelta(days=1), override_consumers=True)
    assert (done.removed, done.held_for_consumers, done.horizon) == (2, 0, ulids[3])
    with pytest.raises(FellBehindRetention):
        feed.client.read_page(conn, 0, ulids[1])
    assert [e.key[0] for e in feed.read_all(conn, 0, ulids[3])] == [5]
    assert feed.client.consumers(conn) == [("lake", 0, ulids[1])]
    assert feed.client.forget_consumer(conn, "lake") == 1
    assert feed.client.consumers(conn) == []
    assert scalar(conn, f"select removed from {feed.obj('retention')} where shard_id = 0;") == 4


def test_keep_last_keeps_whole_transactions_and_arguments_are_checked(
    fresh: Any, conn: Any
) -> None:
    feed: LiveFeed = fresh("blocking_int")
    ulids = _history(feed, conn)
    # the 4th newest event is the second of the first transaction: its block stays whole
    [done] = feed.client.retain(conn, keep_last=4)
    assert done.removed == 0
    [done] = feed.client.retain(conn, keep_last=3)
    assert done.removed == 2 and done.horizon == ulids[1]
    for sql, text in (
        (f"exec {feed.obj('retain')};", "needs a policy"),
        (f"exec {feed.obj('retain')} @keep_last = -1;", "must be 0 or more"),
        (f"exec {feed.obj('save_cursor')} @consumer = N'', @shard_id = 0, @cursor = 0x00;",
         "1 to 200 characters"),
        (f"exec {feed.obj('save_cursor')} @consumer = {lit('x' * 201)}, @shard_id = 0, "
         f"@cursor = 0x{bytes(16).hex()};", "1 to 200 characters"),
        (f"exec {feed.obj('forget_consumer')} @consumer = null;", "not NULL"),
    ):  # fmt: skip
        expect_error(conn, sql, number=51063, text=text)
    # a cursor of another length: 51065, as every ULID argument (test_live_validation.py)
    expect_error(conn, f"exec {feed.obj('save_cursor')} @consumer = N'a', @shard_id = 0, "
                       f"@cursor = 0x{bytes(17).hex()};", number=51065)  # fmt: skip
    with pytest.raises(InvalidArgument):
        feed.client.retain(conn)


def test_an_outbox_feed_and_every_shard(fresh: Any, conn: Any) -> None:
    """Outbox mode: read_feed moves, then checks the horizon before returning its page."""
    feed: LiveFeed = fresh("outbox_int")
    feed.outbox_insert(conn, 0, [[1]], OLD)
    feed.outbox_insert(conn, 3, [[2]], OLD)
    feed.outbox_insert(conn, 3, [[3]])
    assert len(feed.read_all(conn, 0)) == 1 and len(feed.read_all(conn, 3)) == 2
    done = feed.client.retain(conn, max_age=timedelta(hours=1))
    assert [(d.shard_id, d.removed) for d in done] == [(0, 1), (3, 1)]
    with pytest.raises(FellBehindRetention):
        feed.client.read_page(conn, 3, bytes(16))
    feed.outbox_insert(conn, 0, [[4]])
    horizon = feed.client.retention_horizon(conn, 0)
    assert horizon is not None
    assert [e.key[0] for e in feed.read_all(conn, 0, horizon)] == [4]


def test_the_reader_registers_cursors_but_cannot_remove_events(
    mssql: Server, fresh: Any, conn: Any
) -> None:
    feed: LiveFeed = fresh("blocking_int")
    user = "cf_retention_reader"
    run(conn, f"if database_principal_id({lit(user)}) is null create user {q(user)} without login;")
    run(conn, f"alter role {feed.role('reader')} add member {q(user)};")
    feed.client.info(conn)  # the registry entry, read as the admin
    with mssql.connection() as c:
        run(c, f"execute as user = {lit(user)};")
        try:
            feed.client.save_cursor(c, "lake", 0, bytes(16))
            assert feed.client.consumers(c) == [("lake", 0, bytes(16))]
            assert feed.client.retention_horizon(c, 0) is None
            expect_error(c, f"exec {feed.obj('retain')} @keep_last = 0;", number=DENIED)
            expect_error(c, f"delete from {feed.obj('consumer')};", number=DENIED)
            assert feed.client.forget_consumer(c, "lake") == 1
        finally:
            run(c, "revert;")


def test_a_feed_registered_before_retention_gets_it_from_setup(fresh: Any, conn: Any) -> None:
    """Drop the retention objects (and the snapshot objects, which came later) and register
    the old names: setup says updated (not 51053), creates them and keeps the events; retain
    works afterwards."""
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]], OLD)
    for kind in ("retain", "save_cursor", "forget_consumer", "snapshot_begin", "snapshot_finish"):
        run(conn, f"drop procedure {feed.obj(kind)};")
    for kind in ("retention", "consumer", "snapshot"):
        run(conn, f"drop table {feed.obj(kind)};")
    old = {k: v for k, v in feed.names.items() if k not in (
        "retention", "consumer", "pk_retention", "pk_consumer", "retain", "save_cursor",
        "forget_consumer", "snapshot", "pk_snapshot", "snapshot_begin",
        "snapshot_finish")}  # fmt: skip
    feeds = q(feed.spec["schema"]) + ".[feeds]"
    run(conn, f"update {feeds} set names = {lit(json.dumps(old, sort_keys=True))} "
              f"where feed_id = {lit(feed.spec['feed_id'])};")  # fmt: skip
    feed.client.refresh(conn)
    with pytest.raises(Exception, match="upgrade_feed"):
        feed.client.retain(conn, keep_last=0)
    assert feed.setup(conn) == "updated"
    assert feed.setup(conn) == "unchanged"
    feed.client.refresh(conn)
    [done] = feed.client.retain(conn, keep_last=0)
    assert done.removed == 1
