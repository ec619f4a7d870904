"""Setup, upgrade and teardown on a real SQL Server: idempotency (D1), one transaction
(D2), clear errors for a changed mode or key and for leftovers, roles, long names."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tests.support.sqlserver_live import (
    LiveFeed,
    Server,
    expect_error,
    lit,
    q,
    run,
    scalar,
)


def _objects_exist(conn: Any, feed: LiveFeed) -> dict[str, bool]:
    out = {}
    for kind, name in feed.names.items():
        if kind in ("writer", "reader"):
            probe = f"database_principal_id({lit(name)})"
        elif kind == "read_type":
            probe = f"type_id({lit(feed.obj(kind))})"
        elif kind.startswith(("pk_", "df_", "ck_")):
            probe = f"object_id({lit(feed.schema + '.' + q(name))})"
        elif kind.startswith("ix_"):
            probe = (
                f"(select top (1) 1 from sys.indexes where name = {lit(name)} "
                f"and object_id = object_id({lit(feed.obj('outbox'))}))"
            )
        else:
            probe = f"object_id({lit(feed.obj(kind))})"
        out[kind] = scalar(conn, f"select case when {probe} is null then 0 else 1 end;") == 1
    return out


@pytest.mark.parametrize(
    "case", ["blocking_int", "outbox_composite", "outbox_many_types", "blocking_long_names"]
)
def test_setup_creates_every_object_and_a_second_setup_is_a_no_op(
    fresh: Any, conn: Any, case: str
) -> None:
    feed = fresh(case)
    exists = _objects_exist(conn, feed)
    assert all(exists.values()), [k for k, v in exists.items() if not v]
    last_change = (
        "select max(modify_date) from sys.objects "
        f"where schema_id = schema_id({lit(feed.spec['schema'])});"
    )
    modified = scalar(conn, last_change)
    assert feed.setup(conn) == "unchanged"
    assert scalar(conn, last_change) == modified
    row = run(
        conn,
        f"select mode, protocol_version from {feed.schema}.[feeds] "
        f"where feed_id = {lit(feed.spec['feed_id'])};",
    )
    assert row == [(feed.spec["mode"], feed.spec["protocol_version"])]


def test_upgrade_recreates_procedures_and_keeps_data(fresh: Any, conn: Any) -> None:
    feed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    assert feed.upgrade(conn) == "upgraded"
    assert feed.count(conn, "feed") == 1
    feed.write(conn, 0, [[2]])
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [1, 2]


def test_upgrade_from_protocol_1_abandons_pending_protocol_1_writes(
    fresh: Any, mssql: Server, conn: Any
) -> None:
    """A write whose lock call ran under protocol 1 never moved the state row past its
    block, so the upgrade to protocol 2 abandons pending writes: their commit fails (51012)
    instead of leaving events above the head. Simulated by registering protocol 1 while a
    write is pending."""
    feed = fresh("blocking_int")
    registry = f"{feed.schema}.[feeds] where feed_id = {lit(feed.spec['feed_id'])}"
    with mssql.connection() as writer:
        w = feed.lock(writer, 0)
        run(writer, "begin transaction;\n" + feed.insert_events_sql(0, [[1]]))
        run(conn, f"update {registry.replace(' where', ' set protocol_version = 1 where')};")
        assert feed.upgrade(conn) == "upgraded"
        assert scalar(conn, f"select protocol_version from {registry};") == 3
        reason = scalar(
            conn,
            f"select end_reason from {feed.obj('session')} "
            f"where shard_id = 0 and write_id = {lit(w.write_id)};",
        )
        assert reason == "upgraded"
        expect_error(writer, feed.publish_sql(), number=51012, text="was abandoned (upgraded)")
        feed.client.release(writer)
    feed.write(conn, 0, [[2]])
    assert [r.key[0] for r in feed.read_all(conn, 0)] == [2]
    sp = feed.client.safe_point(conn, 0)
    assert sp.pending == 0 and sp.safe_point == sp.head


def test_changed_options_update_through_setup(fresh: Any, conn: Any) -> None:
    feed = fresh("blocking_int")
    run(
        conn,
        f"update {feed.schema}.[feeds] set options = N'{{}}' "
        f"where feed_id = {lit(feed.spec['feed_id'])};",
    )
    assert feed.setup(conn) == "updated"
    assert feed.setup(conn) == "unchanged"


def test_a_changed_mode_fails_and_names_the_remedy(fresh: Any, conn: Any) -> None:
    fresh("blocking_int")
    outbox = LiveFeed("outbox_int")  # the same table, shop.orders, in outbox mode
    message = expect_error(conn, outbox.batches["setup"], number=51051)
    assert "set up in blocking mode, but the config says outbox" in message
    assert "teardown_feed" in message and "setup_feed" in message
    message = expect_error(conn, outbox.batches["upgrade"], number=51051)
    assert "cannot change the mode" in message


def test_a_changed_key_fails_and_names_the_remedy(fresh: Any, conn: Any) -> None:
    feed = fresh("blocking_int")
    run(
        conn,
        f'update {feed.schema}.[feeds] set key_signature = N\'[["id", "bigint", null, false]]\' '
        f"where feed_id = {lit(feed.spec['feed_id'])};",
    )
    message = expect_error(conn, feed.batches["setup"], number=51052)
    assert '"id", "bigint"' in message and '"order_id", "int"' in message
    assert "teardown_feed" in message
    expect_error(conn, feed.batches["upgrade"], number=51052)


def test_a_failed_setup_leaves_nothing_behind(mssql: Server, conn: Any) -> None:
    """All or nothing (D2): a leftover object makes setup fail, and nothing else of the
    feed is created, not even its registry row."""
    feed = LiveFeed("outbox_int")
    feed.create_source(conn)
    feed.teardown(conn)
    LiveFeed("blocking_int").teardown(conn)
    run(conn, f"create table {feed.obj('incident')} (x int);")  # e.g. an mssql-changefeed leftover
    try:
        message = expect_error(conn, feed.batches["setup"], number=51055)
        assert feed.obj("incident") in message and "mssql-changefeed" in message
        exists = _objects_exist(conn, feed)
        assert [k for k, v in exists.items() if v] == ["incident"]
        assert (
            scalar(
                conn,
                f"select count(*) from {feed.schema}.[feeds] "
                f"where feed_id = {lit(feed.spec['feed_id'])};",
            )
            == 0
        )
    finally:
        run(conn, f"drop table {feed.obj('incident')};")


def test_concurrent_setups_create_one_feed(mssql: Server, conn: Any) -> None:
    feed = LiveFeed("outbox_composite")
    feed.create_source(conn)
    feed.teardown(conn)
    results: list[str] = []
    errors: list[BaseException] = []

    def setup() -> None:
        try:
            with mssql.connection() as c:
                results.append(feed.setup(c))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=setup) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(results) == ["created", "unchanged", "unchanged", "unchanged"]


def test_teardown_drops_everything_including_roles_with_members(mssql: Server, conn: Any) -> None:
    feed = LiveFeed("blocking_composite")
    feed.create_source(conn)
    feed.teardown(conn)
    assert feed.setup(conn) == "created"
    run(
        conn,
        "if database_principal_id(N'cf_member') is null create user [cf_member] without login;\n"
        f"alter role {feed.role('writer')} add member [cf_member];\n"
        f"alter role {feed.role('reader')} add member [cf_member];",
    )
    feed.write(conn, 0, [["6f9619ff-8b86-d011-b42d-00c04fc964ff", "sku", 1]])
    assert feed.teardown(conn) == "dropped"
    assert not any(_objects_exist(conn, feed).values())
    assert feed.teardown(conn) == "absent"
    assert (
        scalar(conn, "select count(*) from sys.tables where name = N'order_lines'") == 1
    )  # the source table is not touched


def test_hostile_and_long_names_set_up_and_tear_down(fresh: Any, conn: Any) -> None:
    for case in ("blocking_hostile", "outbox_hostile", "outbox_long_names"):
        feed = fresh(case)
        assert all(_objects_exist(conn, feed).values()), case
        assert feed.setup(conn) == "unchanged"
        assert feed.teardown(conn) == "dropped"
        assert not any(_objects_exist(conn, feed).values()), case


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "outbox_many_types",
            {
                "booked_at": ("datetime2", 7, 23, 3, None, False),
                "amount": ("decimal", 9, 18, 4, None, False),
                "note": ("varchar", -1, 0, 0, "SQL_Latin1_General_CP1_CI_AS", False),
                "code": ("char", 10, 0, 0, "Danish_Norwegian_CS_AS", False),
                "day": ("date", 3, 10, 0, None, True),
                "blob": ("varbinary", -1, 0, 0, None, False),
            },
        ),
        (
            "outbox_composite",
            {
                "tenant_id": ("uniqueidentifier", 16, 0, 0, None, False),
                "sku": ("nvarchar", 80, 0, 0, "Latin1_General_CI_AS", False),
                "version": ("bigint", 8, 19, 0, None, False),
            },
        ),
    ],
)
def test_the_key_column_query_reads_the_catalogue(
    conn: Any, case: str, expected: dict[str, tuple[Any, ...]]
) -> None:
    """The rows _sqlserver_key_columns spells into data types (the spelling of these very
    tuples is checked in test_sqlserver_render.py)."""
    feed = LiveFeed(case)
    feed.create_source(conn)
    rows = run(conn, feed.batches["key_columns"])
    got = {r[0]: (r[1], r[2], r[3], r[4], r[5], bool(r[6])) for r in rows}
    for name, value in expected.items():
        assert got[name] == value, name
    in_key = sorted((r[7], r[0]) for r in rows if r[7] is not None)
    if case == "outbox_composite":  # a real primary key, in key order
        assert [name for _, name in in_key] == ["tenant_id", "sku", "version"]
