"""Outbox mode with ``capture: trigger`` on a real SQL Server (protocol section 5): the
source table's AFTER INSERT, UPDATE, DELETE trigger writes the outbox rows inside the
writer's own statement. The feeds are the render matrix's ``outbox_trigger*`` cases,
set up from their rendered batches (tests/sqlserver_matrix.py)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sqlserver_live.livekit import (
    LiveFeed,
    Server,
    block_of,
    expect_error,
    lit,
    q,
    run,
    scalar,
)

TENANT = "6f9619ff-8b86-d011-b42d-00c04fc964ff"


def source(feed: LiveFeed) -> str:
    return f"{q(feed.spec['source_schema'])}.{q(feed.spec['source_table'])}"


def shard_of(conn: Any, sku: str) -> int:
    """The case's shard expression, abs(checksum([sku])) % 4, for one sku."""
    return int(scalar(conn, f"select abs(checksum(convert(nvarchar(40), {lit(sku)}))) % 4;"))


def outbox_keys(conn: Any, feed: LiveFeed) -> list[tuple[int, str, int]]:
    rows = run(
        conn, f"select shard_id, sku, version from {feed.obj('outbox')} order by order_sequence;"
    )
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def test_every_change_becomes_exactly_its_outbox_rows_and_events(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    table = source(feed)
    row = f"{lit(TENANT)}, N'a', 1"
    run(conn, f"begin transaction; insert into {table} (tenant_id, sku, version) values ({row}), "
              f"({lit(TENANT)}, N'b', 1); commit;")  # fmt: skip
    run(conn, f"begin transaction; update {table} set payload = N'x' where sku = N'a'; commit;")
    run(conn, f"begin transaction; update {table} set version = 2 where sku = N'b'; commit;")
    run(conn, f"begin transaction; delete from {table} where sku = N'a'; commit;")
    run(conn, f"begin transaction; insert into {table} (tenant_id, sku, version) values "
              f"({lit(TENANT)}, N'c', 1); rollback;")  # fmt: skip
    a, b = shard_of(conn, "a"), shard_of(conn, "b")
    assert sorted(outbox_keys(conn, feed)) == sorted([
        (a, "a", 1), (b, "b", 1),  # the insert of two rows
        (a, "a", 1),               # an update that keeps the key: one row
        (b, "b", 1), (b, "b", 2),  # a key change: the old and the new key
        (a, "a", 1),               # the delete
    ])  # fmt: skip
    by_shard: dict[int, list[Any]] = {}
    for shard in {a, b}:
        by_shard[shard] = feed.read_all(conn, shard)
    events = [r for rows in by_shard.values() for r in rows]
    assert len(events) == 6 and feed.count(conn, "outbox") == 0
    # one block per source transaction and shard (O2)
    blocks = {block_of(r[0]) for r in events}
    assert len(blocks) == (4 if a == b else 5)


def test_a_writer_with_rights_on_the_source_only(mssql: Server, fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    table = source(feed)
    run(conn, "if database_principal_id(N'cf_capture_app') is null "
              "create user [cf_capture_app] without login;")  # fmt: skip
    run(conn, f"grant select, insert, update, delete on {table} to [cf_capture_app];")
    with mssql.connection() as c:
        run(c, "execute as user = N'cf_capture_app';")
        try:
            run(
                c, f"insert into {table} (tenant_id, sku, version) values ({lit(TENANT)}, N'w', 1);"
            )
            expect_error(c, f"select * from {feed.obj('outbox')};", number=229)
        finally:
            run(c, "if @@trancount > 0 rollback;")
            run(c, "revert;")
    assert [r[2] for r in feed.read_all(conn, shard_of(conn, "w"))] == ["w"]


def test_setup_is_idempotent_and_recreates_a_lost_trigger(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    trigger = f"{q(feed.spec['source_schema'])}.{q('capture:changefeed.shop.order_lines')}"
    assert scalar(conn, f"select object_id({lit(trigger)}, N'TR');") is not None
    assert feed.setup(conn) == "unchanged"
    run(conn, f"drop trigger {trigger};")
    assert feed.setup(conn) == "repaired"
    assert scalar(conn, f"select object_id({lit(trigger)}, N'TR');") is not None
    assert feed.setup(conn) == "unchanged"
    assert feed.teardown(conn) == "dropped"
    assert scalar(conn, f"select object_id({lit(trigger)}, N'TR');") is None


def test_a_shard_expression_the_table_cannot_evaluate_fails_the_setup(conn: Any) -> None:
    feed = LiveFeed("outbox_trigger")
    feed.create_source(conn)
    feed.teardown(conn)
    # the source without its sku column: the expression abs(checksum([sku])) % 4 fails
    run(
        conn,
        f"drop table {source(feed)}; create table {source(feed)} (tenant_id "
        "uniqueidentifier not null, version bigint not null, payload nvarchar(100) null);",
    )
    message = expect_error(conn, feed.batches["setup"], number=51058)
    assert "the shard expression abs(checksum([sku])) % 4 of the feed shop.order_lines" in message
    assert scalar(conn, f"select object_id({lit(feed.obj('outbox'))});") is None  # nothing left


@pytest.mark.parametrize("case", ["outbox_trigger_hostile", "outbox_trigger_long_names"])
def test_hostile_and_long_names(fresh: Any, conn: Any, case: str) -> None:
    feed: LiveFeed = fresh(case)
    keys = feed.keys_sql
    values = {
        "outbox_trigger_hostile": "1, N'x''y', '2024-01-02T03:04:05', 1.5",
        "outbox_trigger_long_names": "7",
    }[case]
    run(conn, f"insert into {source(feed)} ({keys}) values ({values});")
    shard = 0 if case.endswith("long_names") else int(scalar(
        conn, f"select top (1) shard_id from {feed.obj('outbox')};"))  # fmt: skip
    assert len(feed.read_all(conn, shard)) == 1
    assert feed.teardown(conn) == "dropped"


def test_upgrade_keeps_capture_and_refuses_to_switch_it_off(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    assert feed.upgrade(conn) == "upgraded"
    # the same feed's upgrade batch without capture (render case outbox_composite)
    without = LiveFeed("outbox_composite")
    assert without.spec["feed_id"] == feed.spec["feed_id"]
    message = expect_error(conn, without.batches["upgrade"], number=51059)
    assert "is registered with capture trigger" in message
    trigger = f"{q(feed.spec['source_schema'])}.{q('capture:changefeed.shop.order_lines')}"
    assert scalar(conn, f"select object_id({lit(trigger)}, N'TR');") is not None
