"""Outbox mode with ``capture: trigger`` on a real SQL Server (protocol section 5): the
source table's AFTER INSERT, UPDATE, DELETE trigger writes the outbox rows inside the
writer's own statement. The feeds are the render matrix's ``outbox_trigger*`` cases,
set up from their rendered batches (tests/support/sqlserver_matrix.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.support.sqlserver_live import (
    LiveFeed,
    Server,
    Threads,
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
    blocks = {block_of(r.ulid) for r in events}
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
    assert [r.key[1] for r in feed.read_all(conn, shard_of(conn, "w"))] == ["w"]


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


def test_a_setup_that_leaves_capture_out_keeps_it(fresh: Any, conn: Any) -> None:
    """51073: the setup batch of the same feed without capture (render case
    outbox_composite, whose spec states no capture) refuses to drop the registered
    capture trigger and changes nothing (issue "Sources change", item 3)."""
    feed: LiveFeed = fresh("outbox_trigger")
    without = LiveFeed("outbox_composite")
    assert without.spec["feed_id"] == feed.spec["feed_id"]
    message = expect_error(conn, without.batches["setup"], number=51073)
    assert "would drop what its arguments leave out" in message and "capture: none" in message
    trigger = f"{q(feed.spec['source_schema'])}.{q('capture:changefeed.shop.order_lines')}"
    assert scalar(conn, f"select object_id({lit(trigger)}, N'TR');") is not None


def test_a_shard_expression_of_another_integer_type_fails_the_setup(conn: Any) -> None:
    """Review #8: `[version] % 4` is bigint. It converts to int implicitly, so the probe
    insert compiles and every write would convert it; setup asks for the expression's
    type and refuses it (51058) before creating anything."""
    feed = LiveFeed("outbox_trigger_bigint_shard")
    feed.create_source(conn)
    feed.teardown(conn)
    message = expect_error(conn, feed.batches["setup"], number=51058)
    assert "the shard expression [version] % 4 of the feed shop.order_lines gives bigint" in message
    assert "int, smallint or tinyint" in message
    assert scalar(conn, f"select object_id({lit(feed.obj('outbox'))});") is None


def _trigger(feed: LiveFeed) -> str:
    return f"{q(feed.spec['source_schema'])}.{q('capture:changefeed.shop.order_lines')}"


def test_an_unchanged_trigger_is_not_altered(fresh: Any, conn: Any) -> None:
    """Review #20: upgrade re-creates the procedures; the trigger's text is the same, so
    it is left alone (no schema lock on the source table): same modify_date."""
    feed: LiveFeed = fresh("outbox_trigger")
    modified = (
        f"select modify_date from sys.triggers where object_id = object_id({lit(_trigger(feed))});"
    )
    before = scalar(conn, modified)
    run(conn, "waitfor delay '00:00:00.050';")
    assert feed.upgrade(conn) == "upgraded"
    assert scalar(conn, modified) == before
    # a disabled trigger is altered and enabled again by the next setup that changes anything
    run(conn, f"disable trigger {_trigger(feed)} on {source(feed)};")
    assert feed.upgrade(conn) == "upgraded"
    disabled = (
        f"select is_disabled from sys.triggers where object_id = object_id({lit(_trigger(feed))});"
    )
    assert scalar(conn, disabled) in (False, 0)


def test_a_trigger_change_waits_at_most_its_lock_timeout(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """Review #20: a transaction on the source table blocks the trigger's schema lock;
    setup gives up after 10 s with 51061, changes nothing, and leaves the connection's own
    lock_timeout as it was."""
    feed: LiveFeed = fresh("outbox_trigger")
    run(conn, f"drop trigger {_trigger(feed)};")
    with mssql.connection() as busy:
        run(busy, f"begin transaction; insert into {source(feed)} (tenant_id, sku, version) "
                  f"values ({lit(TENANT)}, N'busy', 1);")  # fmt: skip
        try:
            message = expect_error(conn, feed.batches["setup"], number=51061)
        finally:
            run(busy, "rollback;")
    assert "could not change the capture trigger of [shop].[order_lines]" in message
    assert scalar(conn, "select @@lock_timeout;") == -1
    assert scalar(conn, f"select object_id({lit(_trigger(feed))}, N'TR');") is None
    assert feed.setup(conn) == "repaired"


def test_the_trigger_union_meets_the_sequence_default(fresh: Any, conn: Any) -> None:
    """Review #24: an UPDATE fires the trigger with `inserted` and `deleted`, whose union
    is staged in a table variable before the outbox insert that draws order_sequence
    from NEXT VALUE FOR. Rows that keep their key give one outbox row, rows whose key
    changed two, each with its own order_sequence."""
    feed: LiveFeed = fresh("outbox_trigger")
    table = source(feed)
    rows = ", ".join(f"({lit(TENANT)}, N'{sku}', 1)" for sku in "kmn")
    run(conn, f"insert into {table} (tenant_id, sku, version) values {rows};")
    run(conn, f"delete from {feed.obj('outbox')};")
    run(conn, f"update {table} set version = case sku when N'k' then 2 else version end, "
              "payload = N'p';")  # fmt: skip
    keys = sorted((sku, version) for _, sku, version in outbox_keys(conn, feed))
    assert keys == [("k", 1), ("k", 2), ("m", 1), ("n", 1)]
    sequences = [r[0] for r in run(conn, f"select order_sequence from {feed.obj('outbox')};")]
    assert len(set(sequences)) == 4


def test_a_changed_key_column_stops_the_writes_until_setup_runs_again(
    fresh: Any, conn: Any
) -> None:
    """Issue 14, item 1: the key column sku swapped by name with payload (another type
    and collation) would capture payload's values as keys. The trigger refuses the write
    with 51067, naming the feed and the fix, and nothing is written; setup writes the
    trigger anew for the columns as they are, and writes are captured again."""
    feed: LiveFeed = fresh("outbox_trigger")
    table = source(feed)
    rename = "exec sp_rename N'shop.order_lines.{}', N'{}', N'COLUMN';"
    run(conn, rename.format("sku", "cf_swap") + rename.format("payload", "sku")
              + rename.format("cf_swap", "payload"))  # fmt: skip
    insert = (
        f"begin transaction; insert into {table} (tenant_id, sku, version, payload) "
        f"values ({lit(TENANT)}, N'new key', 1, N'old key'); commit;"
    )
    message = expect_error(conn, insert, number=51067)
    assert "the key columns of [shop].[order_lines] changed" in message
    assert "the feed shop.order_lines" in message and "Run setup_feed" in message
    assert scalar(conn, "select @@trancount;") == 0
    assert feed.count(conn, "outbox") == 0
    assert int(scalar(conn, f"select count(*) from {table};")) == 0
    assert feed.setup(conn) == "repaired"
    assert feed.setup(conn) == "unchanged"
    run(conn, insert)
    assert [sku for _, sku, _ in outbox_keys(conn, feed)] == ["new key"]


def test_one_keys_events_follow_the_order_its_writes_took_effect(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """O8: transaction a writes a row of its own, then waits for key k's lock until b, which
    updated k, commits; a then updates k and commits. The feed must list b's event of k
    before a's, though a took the smaller first order_sequence."""
    feed: LiveFeed = fresh("outbox_trigger")
    table = source(feed)
    shard = shard_of(conn, "k")
    marker = next(s for s in (f"m{i}" for i in range(200)) if shard_of(conn, s) == shard)
    run(conn, f"begin transaction; insert into {table} (tenant_id, sku, version) values "
              f"({lit(TENANT)}, N'k', 1); commit;")  # fmt: skip
    with mssql.connection() as a, mssql.connection() as b:
        a_session = int(scalar(a, "select @@spid;"))
        run(a, f"begin transaction; insert into {table} (tenant_id, sku, version) values "
               f"({lit(TENANT)}, {lit(marker)}, 1);")  # fmt: skip
        run(b, f"begin transaction; update {table} set payload = N'b' where sku = N'k';")
        threads = Threads()
        threads.start(
            run, a, f"update {table} set payload = N'a' where sku = N'k'; commit transaction;"
        )
        deadline = time.monotonic() + 20
        while not scalar(
            conn, "select count(*) from sys.dm_exec_requests "
                  f"where session_id = {a_session} and blocking_session_id <> 0;"
        ):  # fmt: skip
            assert time.monotonic() < deadline, "a never waited for k's lock"
            time.sleep(0.05)
        run(b, "commit transaction;")
        threads.join(60)
    events = feed.read_all(conn, shard)
    a_block = next(block_of(e.ulid) for e in events if e.key[1] == marker)
    k_events = [block_of(e.ulid) == a_block for e in events if e.key[1] == "k"]
    assert k_events == [False, False, True], "the insert, b's update, then a's update"
    assert scalar(conn, f"select payload from {table} where sku = N'k';") == "a"
