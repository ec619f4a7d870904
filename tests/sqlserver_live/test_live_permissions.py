"""Roles on a real SQL Server (protocol section 9): what the writer and the reader of a
feed may do, and, as importantly, what they may not. Users without logins, impersonated
with EXECUTE AS USER."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.support.sqlserver_live import (
    LiveFeed,
    Server,
    acting_as,
    expect_error,
    lit,
    q,
    run,
)

DENIED = 229  # "The ... permission was denied on the object ..."


def _users(conn: Any, feed: LiveFeed, prefix: str) -> dict[str, str]:
    users = {role: f"{prefix}_{role}" for role in ("writer", "reader", "nobody")}
    for role, user in users.items():
        run(
            conn,
            f"if database_principal_id({lit(user)}) is null create user {q(user)} without login;",
        )
        if role != "nobody":
            run(conn, f"alter role {feed.role(role)} add member {q(user)};")
    return users


@pytest.fixture
def blocking(fresh: Any, conn: Any) -> tuple[LiveFeed, dict[str, str]]:
    feed = fresh("blocking_composite")
    return feed, _users(conn, feed, "cf_b")


@pytest.fixture
def outbox(fresh: Any, conn: Any) -> tuple[LiveFeed, dict[str, str]]:
    feed = fresh("outbox_composite")
    return feed, _users(conn, feed, "cf_o")


ROW = ["6f9619ff-8b86-d011-b42d-00c04fc964ff", "sku", 1]


def test_blocking_writer(mssql: Server, blocking: tuple[LiveFeed, dict[str, str]]) -> None:
    feed, users = blocking
    with acting_as(mssql, users["writer"]) as c:
        feed.write(c, 0, [ROW])  # lock, ulid(), insert into the feed, update_state, release
        for sql in [
            f"select * from {feed.obj('feed')};",
            f"select * from {feed.obj('state')};",
            f"select * from {feed.obj('session')};",
            f"update {feed.obj('state')} set generation = 5;",
            f"exec {feed.obj('read_feed')} @shard_id = 0;",
            f"exec {feed.obj('safe_point')};",
            f"exec {feed.obj('tombstone')} 0, 1, '6f9619ff-8b86-d011-b42d-00c04fc964ff';",
        ]:
            expect_error(c, sql, number=DENIED)
    with acting_as(mssql, users["reader"]) as c:
        assert [r.key[2] for r in feed.read_all(c, 0)] == [1]


Feed = tuple[LiveFeed, dict[str, str]]


def test_blocking_reader(mssql: Server, blocking: Feed, conn: Any) -> None:
    feed, users = blocking
    feed.write(conn, 0, [ROW])
    with acting_as(mssql, users["reader"]) as c:
        assert len(feed.read_all(c, 0)) == 1
        assert run(c, f"select count(*) from {feed.obj('feed')};") == [(1,)]
        assert feed.client.safe_point(c, 0).pending == 0
        barrier = feed.client.barrier_acquire(c, 0)
        assert feed.client.barrier_check(c, barrier) is True
        assert feed.client.tombstone(c, 0, 1, uuid.uuid4()) is False
        assert 0 in [r[0] for r in run(c, f"exec {feed.obj('shards')};")]
        for sql in [
            f"exec {feed.obj('lock')} @shard_id = 0;",
            f"exec {feed.obj('update_state')};",
            f"select {feed.obj('ulid')}(1);",
            f"insert into {feed.obj('feed')} (shard_id, ulid, {feed.keys_sql}) "
            f"values (0, 0x01, {', '.join(lit(v) for v in ROW)});",
            f"delete from {feed.obj('feed')};",
            f"select * from {feed.obj('state')};",
            f"select next value for {feed.obj('sequence')};",
        ]:
            expect_error(c, sql, number=DENIED)


def test_outbox_writer_and_reader(mssql: Server, outbox: tuple[LiveFeed, dict[str, str]]) -> None:
    feed, users = outbox
    with acting_as(mssql, users["writer"]) as c:
        feed.outbox_insert(c, 0, [ROW])  # the defaults draw on the sequence
        feed.outbox_insert(c, 7, [ROW])  # shard 7: only an unmoved outbox row
        for sql in [
            f"select * from {feed.obj('outbox')};",
            f"select * from {feed.obj('feed')};",
            f"exec {feed.obj('read_feed')} @shard_id = 0;",
            f"delete from {feed.obj('outbox')};",
        ]:
            expect_error(c, sql, number=DENIED)
    with acting_as(mssql, users["reader"]) as c:
        assert 7 in [r[0] for r in run(c, f"exec {feed.obj('shards')};")]
        # read_feed moves the outbox on the reader's behalf: ownership chaining
        assert [r.key[2] for r in feed.read_all(c, 0)] == [1]
        barrier = feed.client.barrier_acquire(c, 0)  # draws on the sequence, inside the procedure
        assert feed.client.barrier_check(c, barrier) is True
        for sql in [
            f"select * from {feed.obj('outbox')};",
            f"insert into {feed.obj('outbox')} (shard_id, {feed.keys_sql}) "
            f"values (0, {', '.join(lit(v) for v in ROW)});",
            f"exec {feed.obj('feed_write_lock')} @shard_id = 0;",
        ]:
            expect_error(c, sql, number=DENIED)


def test_nobody_else_may_do_anything(mssql: Server, blocking: Feed) -> None:
    feed, users = blocking
    with acting_as(mssql, users["nobody"]) as c:
        for sql in [
            f"exec {feed.obj('lock')} @shard_id = 0;",
            f"exec {feed.obj('release')};",
            f"select {feed.obj('ulid')}(1);",
            f"exec {feed.obj('read_feed')} @shard_id = 0;",
            f"exec {feed.obj('safe_point')};",
            f"exec {feed.obj('barrier_acquire')} @shard_id = 0;",
            f"select * from {feed.obj('feed')};",
        ]:
            expect_error(c, sql, number=DENIED)
