"""The one structure behind the two databases (docs/contributing.md, "Dialects"): each
database is a :class:`~changefeed.dialects.Dialect` whose parts (the feed client, the Spark
source's reads, a snapshot's statements) have the same methods and signatures as the other
database's, and whose client refuses the same bad arguments the same way, before any
statement is sent. No database runs here: a connection that is used fails the test."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from changefeed.client import (
    FeedInfo,
    InvalidArgument,
    KeyColumn,
    PostgresFeed,
    SqlServerFeed,
    SqlServerWrite,
    Write,
)
from changefeed.client.feed import FeedClient
from changefeed.dialects import (
    DIALECTS,
    Backend,
    Dialect,
    PostgresDialect,
    SqlServerDialect,
    dialect_for_uri,
    dialect_named,
    parse_connection,
    schemes,
)
from changefeed.dialects.postgres.reads import PostgresBackend
from changefeed.dialects.postgres.snapshot import PostgresStatements
from changefeed.dialects.sqlserver.reads import SqlServerBackend
from changefeed.dialects.sqlserver.snapshot import SqlServerStatements
from changefeed.errors import ChangefeedSourceError


def _public(cls: type) -> dict[str, str]:
    """Each public method of ``cls`` and its signature, the two databases' write handles
    named alike."""
    return {
        name: str(inspect.signature(getattr(cls, name))).replace("SqlServerWrite", "Write")
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


PAIRS = [
    (PostgresFeed, SqlServerFeed),
    (Write, SqlServerWrite),
    (PostgresBackend, SqlServerBackend),
    (PostgresStatements, SqlServerStatements),
    (PostgresDialect, SqlServerDialect),
]


@pytest.mark.parametrize(("postgres", "sqlserver"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_both_databases_parts_have_the_same_methods_and_signatures(
    postgres: type, sqlserver: type
) -> None:
    a, b = _public(postgres), _public(sqlserver)
    assert sorted(set(a) ^ set(b)) == []
    assert {n: (a[n], b[n]) for n in a if a[n] != b[n]} == {}


def test_the_interfaces_are_all_each_part_offers() -> None:
    """What the rest of the package may call is declared on the interface: a public method
    only one dialect's class has would be a seam around it."""
    for base, impls in (
        (FeedClient, (PostgresFeed, SqlServerFeed)),
        (Backend, (PostgresBackend, SqlServerBackend)),
        (Dialect, (PostgresDialect, SqlServerDialect)),
    ):
        declared = set(_public(base))
        for impl in impls:
            assert not inspect.isabstract(impl), impl
            assert set(_public(impl)) - declared - {"from_info"} == set(), impl


def test_the_registry_chooses_by_name_and_scheme() -> None:
    assert set(DIALECTS) == {"postgres", "sqlserver"}
    assert isinstance(dialect_named("postgres"), PostgresDialect)
    assert schemes() == ("postgresql", "postgres", "mssql", "sqlserver")
    assert dialect_for_uri("postgres://u@h/d").name == "postgres"
    assert dialect_for_uri("host=/tmp dbname=shop").name == "postgres"
    assert dialect_for_uri("SQLSERVER://u@h:1433/d").name == "sqlserver"
    with pytest.raises(ChangefeedSourceError, match="not a supported URI"):
        dialect_for_uri("mysql://u:secret@h/d")
    with pytest.raises(ChangefeedSourceError, match="no dialect 'oracle'"):
        dialect_named("oracle")
    # The Spark source's option takes URIs only, as before.
    with pytest.raises(ChangefeedSourceError, match="not a supported URI"):
        parse_connection("host=/tmp dbname=shop")
    assert parse_connection("postgresql://a@h/d", password="p w").uri == "postgresql://a:p%20w@h/d"


def test_an_unreachable_server_is_refused_alike() -> None:
    from changefeed.errors import CannotConnect

    for dialect, uri in (
        (DIALECTS["postgres"], "postgresql://nobody:secret@127.0.0.1:1/shop?connect_timeout=2"),
        (DIALECTS["sqlserver"], "mssql://nobody:secret@127.0.0.1:1/shop?login_timeout=2"),
    ):
        with pytest.raises(CannotConnect, match=f"cannot connect to {dialect.title} at ") as err:
            dialect.connect(uri)
        assert "secret" not in str(err.value)


class _Untouchable:
    """A connection no refused call may use."""

    autocommit = True
    autocommit_state = True

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the connection was used ({name}) before the arguments were checked")


KEYS = (KeyColumn("order_id", "bigint"),)
ROUTINES = ("lock", "release", "feed", "ulid", "sequence", "outbox", "read_feed", "safe_point",
            "tombstone", "update_state", "barrier_acquire", "barrier_check", "shards")  # fmt: skip
NAMES = {k: f"{k}:shop.orders" for k in ROUTINES}


def _clients(mode: str) -> list[FeedClient]:
    return [
        PostgresFeed.from_info(FeedInfo("shop.orders", "changefeed", mode, KEYS, NAMES)),
        SqlServerFeed.from_info(
            FeedInfo("shop.orders", "changefeed", mode, KEYS, NAMES, dialect="sqlserver")
        ),
    ]


def _enter(client: FeedClient, conn: Any, **kwargs: Any) -> None:
    with client.write(conn, **kwargs):
        raise AssertionError("the body ran")


BAD_CALLS: dict[str, tuple[str, Callable[[FeedClient, Any], object]]] = {
    "a shard beyond int": ("blocking", lambda c, conn: c.safe_point(conn, 2**31)),
    "a shard that is text": ("blocking", lambda c, conn: c.read_page(conn, "0")),  # type: ignore[arg-type]
    "a cursor of 15 bytes": ("blocking", lambda c, conn: c.read_page(conn, 0, bytes(15))),
    "a page size of 0": ("blocking", lambda c, conn: c.read_page(conn, 0, bytes(16), 0)),
    "a time hint that is text": (
        "blocking",
        lambda c, conn: _enter(c, conn, shard=0, time_hint="now"),
    ),
    "a lock on a bool shard": ("blocking", lambda c, conn: c.lock(conn, True)),
    "outbox keys of the wrong width": (
        "outbox",
        lambda c, conn: c.insert_outbox(conn, 0, [(1, 2)]),
    ),
    "outbox keys that are null": ("outbox", lambda c, conn: c.insert_outbox(conn, 0, [(None,)])),
    "a tombstone of a bool shard": ("blocking", lambda c, conn: c.tombstone(conn, False, 1, 1)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_the_same_bad_arguments_are_refused_the_same_way(case: str) -> None:
    mode, call = BAD_CALLS[case]
    refusals = []
    for client in _clients(mode):
        with pytest.raises(InvalidArgument) as err:
            call(client, _Untouchable())
        refusals.append((type(err.value), str(err.value)))
    assert refusals[0] == refusals[1]


def test_each_client_refuses_the_other_databases_write_id() -> None:
    postgres, sqlserver = _clients("blocking")
    with pytest.raises(InvalidArgument, match="write_id"):
        postgres.tombstone(_Untouchable(), 0, 1, uuid.uuid4())
    with pytest.raises(InvalidArgument, match="write_id"):
        sqlserver.tombstone(_Untouchable(), 0, 1, 7)


def test_what_one_database_lacks_is_refused_before_any_statement() -> None:
    postgres, sqlserver = _clients("blocking")
    with pytest.raises(InvalidArgument, match="per feed, not per call"):
        postgres.lock(_Untouchable(), 0, datetime(2030, 1, 1), stall_timeout_ms=100)
    with pytest.raises(InvalidArgument, match="per feed, not per call"):
        _enter(postgres, _Untouchable(), shard=0, lock_probe_ms=5)
    handle = SqlServerWrite(
        conn=_Untouchable(), info=sqlserver.info(None), shard_id=0, write_id=uuid.uuid4(),
        session_id=1, ulid_high=bytes(8), block_start=0, ulid_sql="", feed_table="",
    )  # fmt: skip
    with pytest.raises(InvalidArgument, match="no row images"):
        handle.insert_events([(1,)], images=[None])
