"""Least privilege with real login roles (protocol section 9, "Roles").

Login roles are created and granted the feed's writer or reader role, and the scenario
connects *as them* (trust authentication on the embedded server's socket): writers write
and readers read under concurrency, and every forbidden statement is refused with
SQLSTATE 42501 (insufficient_privilege), not some other error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.faults.checker import check
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import run_load

pytestmark = pytest.mark.postgres

_n = itertools.count()


@pytest.fixture
def login_role(admin: psycopg.Connection[Any], pg_uri: str) -> Iterator[Callable[..., Any]]:
    """``login_role(granted_role)`` -> a connect() function for a new login role."""
    made: list[tuple[str, list[psycopg.Connection[Any]]]] = []

    def make(granted: str | None) -> Callable[..., psycopg.Connection[Any]]:
        name = f"pgf_login_{next(_n)}"
        admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("create role {} login").format(sql.Identifier(name)))
        if granted is not None:
            admin.execute(
                sql.SQL("grant {} to {}").format(sql.Identifier(granted), sql.Identifier(name))
            )
        conns: list[psycopg.Connection[Any]] = []
        made.append((name, conns))

        def connect(**kwargs: Any) -> psycopg.Connection[Any]:
            kwargs.setdefault("autocommit", True)
            conn = psycopg.connect(pg_uri, user=name, **kwargs)
            conns.append(conn)
            return conn

        return connect

    yield make
    for name, conns in made:
        for conn in conns:
            conn.close()
        admin.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))


def denied(conn: psycopg.Connection[Any], statement: sql.Composable, params: Any = None) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement, params)


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_writer_and_reader_login_roles(
    make_feed: MakeFeed,
    connect: Connections,
    admin: psycopg.Connection[Any],
    login_role: Callable[..., Any],
    mode: str,
) -> None:
    kit = make_feed(mode, stall_timeout_ms=2000)
    writer_connect = login_role(kit.names["writer_role"])
    reader_connect = login_role(kit.names["reader_role"])
    nobody_connect = login_role(None)
    # The source table belongs to the application; writers need to insert into it.
    admin.execute(
        sql.SQL("grant usage on schema {} to {}; grant insert on {} to {}").format(
            sql.Identifier(kit.source_schema),
            sql.Identifier(kit.names["writer_role"]),
            sql.Identifier(kit.source_schema, kit.source_table),
            sql.Identifier(kit.names["writer_role"]),
        )
    )
    assert writer_connect().info.parameter_status("session_authorization") != "postgres"

    # Writers write and readers read, concurrently, with nothing but their grants.
    result = run_load(
        kit,
        writer_connect,
        reader_connect=reader_connect,
        shards=[0, 1],
        writers=2,
        writes_per_writer=15,
        readers=2,
    )
    assert not result.errors, result.errors
    summary = check(result.history, kit.final(admin))
    assert summary.writes_ok == 30

    q = kit.q
    zero = bytes(16)
    writer = writer_connect()
    forbidden_for_writer: list[tuple[sql.Composable, Any]] = [
        (sql.SQL("select * from {}").format(q("feed")), None),
        (sql.SQL("select * from {}").format(q("state")), None),
        (sql.SQL("select * from {}").format(q("session")), None),
        (sql.SQL("select * from {}").format(q("incident")), None),
        (sql.SQL("update {} set generation = generation + 1").format(q("state")), None),
        (sql.SQL("insert into {} values (9, 0, '\\x00', 1, 0)").format(q("state")), None),
        (sql.SQL("delete from {}").format(q("feed")), None),
        (sql.SQL("update {} set state = 2").format(q("session")), None),
        (sql.SQL("select * from {}(0, %s, 10)").format(q("read_feed")), [zero]),
        (sql.SQL("select * from {}(0)").format(q("safe_point")), None),
        (sql.SQL("select {}(0, 1, 1)").format(q("tombstone")), None),
        (sql.SQL("select * from {}(0)").format(q("barrier_acquire")), None),
    ]
    if mode == "outbox":
        forbidden_for_writer += [
            (sql.SQL("select * from {}").format(q("outbox")), None),
            (sql.SQL("call {}(0)").format(q("move_outbox")), None),
            # txid and order_sequence come from their defaults: a writer cannot forge them.
            (sql.SQL("insert into {} (shard_id, txid, id) values (0, '1', 1)").format(
                q("outbox")), None),
            (sql.SQL("insert into {} (shard_id, order_sequence, id) values (0, 1, 1)").format(
                q("outbox")), None),
            (sql.SQL("update {} set shard_id = 1").format(q("outbox")), None),
        ]  # fmt: skip
    for statement, params in forbidden_for_writer:
        denied(writer, statement, params)

    reader = reader_connect()
    forbidden_for_reader: list[tuple[sql.Composable, Any]] = [
        (sql.SQL("insert into {} (shard_id, ulid, id) values (0, %s, 1)").format(q("feed")),
         [b"\xff" * 16]),
        (sql.SQL("delete from {}").format(q("feed")), None),
        (sql.SQL("update {} set ulid = ulid").format(q("feed")), None),
        (sql.SQL("update {} set generation = 0").format(q("state")), None),
        (sql.SQL("select * from {}").format(q("state")), None),
        (sql.SQL("select * from {}").format(q("session")), None),
        (sql.SQL("select nextval({}::regclass)").format(kit.sequence_literal()), None),
    ]  # fmt: skip
    if mode == "blocking":
        forbidden_for_reader += [
            (sql.SQL("call {}(0)").format(q("lock")), None),
            (sql.SQL("select {}()").format(q("update_state")), None),
            (sql.SQL("select {}()").format(q("release")), None),
            (sql.SQL("select {}(1)").format(q("ulid")), None),
        ]
    else:
        forbidden_for_reader += [
            (sql.SQL("insert into {} (shard_id, id) values (0, 1)").format(q("outbox")), None),
            (sql.SQL("delete from {}").format(q("outbox")), None),
        ]
    for statement, params in forbidden_for_reader:
        denied(reader, statement, params)

    nobody = nobody_connect()
    for statement, params in [
        (sql.SQL("select * from {}(0, %s, 10)").format(q("read_feed")), [zero]),
        (sql.SQL("select * from {}").format(q("feed")), None),
    ]:
        denied(nobody, statement, params)
    # Nothing the refused statements tried changed the feed.
    summary = check(result.history, kit.final(admin))
    assert summary.writes_ok == 30
    assert isinstance(kit, FeedKit)
