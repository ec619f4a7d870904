"""Setting up PostgreSQL feeds through real dbt: idempotence, errors, concurrency,
teardown, upgrade, hostile and long names, and the roles' grants (feeds on dbt models:
tests/test_pg_feed_models.py).

Every feed is set up with ``dbt run-operation changefeed.setup_feed`` (or a model's
post-hook) on the embedded PostgreSQL 16 server.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import errors
from tests.support.dbt_harness import DbtError
from tests.support.pg_feeds import (
    RENDER_SPEC,
    as_role,
    connect,
    create_table,
    object_oids,
    q,
    race,
    registry_row,
    setup_feed,
    shortened,
    teardown_feed,
    upgrade_feed,
)

from changefeed.client import PostgresFeed, WriteAbandoned

pytestmark = pytest.mark.postgres

SPEC = RENDER_SPEC


def _feed_names(admin: psycopg.Connection[Any], feed_id: str) -> dict[str, str]:
    row = registry_row(admin, feed_id)
    assert row is not None, f"{feed_id} is not registered"
    return dict(row["names"])


# -- rendering (pure) ------------------------------------------------------------------


def test_feed_statements_render_without_a_database_round_trip(dbt: Any) -> None:
    blocking, outbox = dbt.render_many(
        [
            "{% for s in changefeed._postgres_feed_statements("
            + SPEC.replace("MODE", "'blocking'")
            + ") %}{{ s }}\n;;\n{% endfor %}",
            "{% for s in changefeed._postgres_feed_statements("
            + SPEC.replace("MODE", "'outbox'")
            + ") %}{{ s }}\n;;\n{% endfor %}",
        ],
        "postgres",
    )
    for kind in ["state", "feed", "session", "incident"]:
        assert f'create table "changefeed"."{kind}:cf_render.t"' in blocking
    assert 'create or replace procedure "changefeed"."lock:cf_render.t"' in blocking
    assert 'create or replace function "changefeed"."ulid:cf_render.t"(v bigint)' in blocking
    assert "outbox:cf_render.t" not in blocking
    assert 'create table "changefeed"."outbox:cf_render.t"' in outbox
    assert 'create or replace procedure "changefeed"."move_outbox:cf_render.t"' in outbox
    assert "lock:cf_render.t" not in outbox.replace("lock_try:cf_render.t", "")
    # Every SECURITY DEFINER routine pins its search_path; every routine loses public's execute.
    for text in (blocking, outbox):
        for statement in text.split("\n;;\n"):
            if "security definer" in statement:
                assert "set search_path = pg_catalog, pg_temp" in statement
        routines = text.count("create or replace function") + text.count(
            "create or replace procedure"
        )
        assert routines > 0 and routines == text.count("from public")


def test_teardown_drops_every_routine_that_setup_creates(dbt: Any) -> None:
    """_postgres_routine_kinds is the one list of routines: setup creates each kind with its
    _postgres_routine_<kind> macro, and the teardown statement drops every one of them."""
    capture = "'protocol_version': 3, 'capture': 'trigger', 'shard': '(id % 3)'"
    specs = [
        SPEC.replace("MODE", "'blocking'"),
        SPEC.replace("MODE", "'outbox'"),
        SPEC.replace("MODE", "'outbox'").replace("'protocol_version': 3", capture),
    ]
    rendered = dbt.render_many(
        [
            "{% set s = " + spec + " %}{% set ctx = changefeed._postgres_feed_context(s) %}"
            "{% for st in changefeed._postgres_feed_statements(s) %}{{ st }}\n;;\n{% endfor %}"
            "@@teardown@@{{ changefeed._postgres_sql_teardown(ctx, ctx['n']) }}"
            for spec in specs
        ],
        "postgres",
    )
    routine = r'(function|procedure) ("changefeed"\."[^"]+")'
    created_per_spec = []
    for text in rendered:
        setup, teardown = text.split("@@teardown@@")
        created = set(re.findall("create or replace " + routine, setup))
        dropped = set(re.findall("drop " + routine.replace(") (", ") if exists (", 1), teardown))
        assert created and created <= dropped, created - dropped
        # Teardown also drops a capture function the registry may not name (capture was
        # switched off, or the row is gone), and nothing else beyond what setup created.
        assert {name for _, name in dropped - created} <= {
            '"changefeed"."capture:cf_render.t"',
            '"changefeed"."recapture:cf_render.t"',
        }
        created_per_spec.append({name for _, name in created})
    blocking, outbox, captured = created_per_spec
    assert '"changefeed"."lock:cf_render.t"' in blocking - outbox
    assert '"changefeed"."move_outbox:cf_render.t"' in outbox - blocking
    assert captured - outbox == {
        '"changefeed"."capture:cf_render.t"',
        '"changefeed"."recapture:cf_render.t"',
    }


def test_reserved_key_column_names_fail_clearly(dbt: Any) -> None:
    spec = SPEC.replace("MODE", "'blocking'").replace("'name': 'id'", "'name': 'ulid'")
    with pytest.raises(
        DbtError, match=re.escape("key column 'ulid' of cf_render.t has the name of a column")
    ):
        dbt.render("{{ changefeed._postgres_feed_statements(" + spec + ") }}", "postgres")


# -- setup, no-op, conflicts -------------------------------------------------------------


def test_setup_creates_every_object_then_a_second_setup_is_a_no_op(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    create_table(admin, "cf_setup", "orders", "order_id bigint primary key, note text")
    teardown_feed(dbt, "cf_setup", "orders")
    logged = setup_feed(dbt, "cf_setup", "orders", "blocking")
    assert any("feed cf_setup.orders created (blocking" in m for m in logged), logged

    row = registry_row(admin, "cf_setup.orders")
    assert row is not None
    assert row["mode"] == "blocking"
    assert row["key_signature"] == '"order_id" bigint'
    assert row["keys"] == [{"name": "order_id", "data_type": "bigint", "collation": None}]
    assert row["options"] == {"stall_timeout_ms": 5000, "lock_probe_ms": 20, "block_bits": 36}
    assert row["protocol_version"] == 3
    names = dict(row["names"])
    assert names["writer_role"] == "changefeed_writer:postgres.cf_setup.orders"
    assert names["guc"].startswith("changefeed.w") and len(names["guc"]) == len("changefeed.w") + 32
    expected_kinds = {
        "state", "feed", "session", "incident", "sequence", "lock", "lock_wait", "lock_try",
        "ulid", "update_state", "release", "read_feed", "safe_point", "tombstone",
        "barrier_acquire", "barrier_check", "shards", "feed_pk", "state_pk", "session_pk",
        "feed_ulid", "guard", "writer_role", "reader_role", "retention", "consumer",
        "retention_pk", "consumer_pk", "retain", "save_cursor", "forget_consumer",
        "snapshot", "snapshot_pk", "snapshot_begin", "snapshot_finish",
    }  # fmt: skip
    oids = object_oids(admin, names)
    assert set(oids) == expected_kinds

    logged = setup_feed(dbt, "cf_setup", "orders", "blocking")
    assert logged == [
        "changefeed: feed cf_setup.orders is already set up (blocking); nothing to do"
    ]
    assert object_oids(admin, names) == oids
    assert not any("snapshot" in m for m in logged)


def test_a_feed_set_up_on_a_table_with_rows_points_to_the_snapshot(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    """Rows that exist at setup are in no event: the setup says so once, naming both ways
    to snapshot them; an empty table, a second setup and a changed setup say nothing."""
    create_table(admin, "cf_setup", "filled", "id bigint primary key, note text")
    create_table(admin, "cf_setup", "empty", "id bigint primary key, note text")
    admin.execute("insert into cf_setup.filled values (1, 'a'), (2, 'b')")
    for table in ("filled", "empty"):
        teardown_feed(dbt, "cf_setup", table)

    logged = setup_feed(dbt, "cf_setup", "filled", "outbox")
    hints = [m for m in logged if "snapshot" in m]
    assert hints == [
        "changefeed: cf_setup.filled already has rows, and they are not in the feed, which "
        "holds the changes from now on; to add them as events, snapshot the table into the "
        "landed feed: changefeed snapshot --connection URI --feed cf_setup.filled --table "
        "LANDED_TABLE, or dbt run-operation changefeed.request_snapshot --args "
        "'{relation: cf_setup.filled}' before the next landing (docs/snapshot.md)"
    ], logged
    assert not any("snapshot" in m for m in setup_feed(dbt, "cf_setup", "filled", "outbox"))
    changed = setup_feed(dbt, "cf_setup", "filled", "outbox", stall_timeout_ms=4000)
    assert any("updated" in m for m in changed) and not any("snapshot" in m for m in changed)
    assert not any("snapshot" in m for m in setup_feed(dbt, "cf_setup", "empty", "blocking"))


def test_changing_the_mode_or_the_key_fails_and_names_the_remedy(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    create_table(admin, "cf_conflict", "orders", "order_id bigint primary key, sku text not null")
    teardown_feed(dbt, "cf_conflict", "orders")
    setup_feed(dbt, "cf_conflict", "orders", "blocking")
    with pytest.raises(DbtError) as mode_change:
        setup_feed(dbt, "cf_conflict", "orders", "outbox")
    message = str(mode_change.value)
    assert 'registered with mode blocking and key ("order_id" bigint)' in message
    assert "asks for mode outbox" in message
    assert "changefeed.teardown_feed --args '{relation: cf_conflict.orders}'" in message
    with pytest.raises(DbtError, match=r'asks for mode blocking and key \("sku" text\)'):
        setup_feed(dbt, "cf_conflict", "orders", "blocking", key=["sku"])
    # Nothing changed.
    assert registry_row(admin, "cf_conflict.orders")["mode"] == "blocking"  # type: ignore[index]


def _catalog_versions(admin: psycopg.Connection[Any], oids: dict[str, int]) -> dict[str, str]:
    """pg_proc's row version (xmin) of each routine: it changes when a routine is replaced."""
    rows = admin.execute(
        "select oid, xmin::text from pg_proc where oid = any(%s)", (list(oids.values()),)
    ).fetchall()
    by_oid = dict(rows)
    return {kind: by_oid[oid] for kind, oid in oids.items() if oid in by_oid}


def test_changed_options_replace_the_routines_in_place_and_keep_the_data(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    create_table(admin, "cf_options", "orders", "order_id bigint primary key")
    teardown_feed(dbt, "cf_options", "orders")
    setup_feed(dbt, "cf_options", "orders", "blocking")
    names = _feed_names(admin, "cf_options.orders")
    before = object_oids(admin, names)
    feed = PostgresFeed("cf_options.orders")
    with connect(pg_uri) as conn, feed.write(conn, 0) as w:
        w.insert_events([(1,)])

    logged = setup_feed(dbt, "cf_options", "orders", "blocking", stall_timeout_ms=800)
    assert any("updated" in m for m in logged), logged
    row = registry_row(admin, "cf_options.orders")
    assert row is not None and row["options"]["stall_timeout_ms"] == 800
    after = object_oids(admin, names)
    assert after["feed"] == before["feed"] and after["state"] == before["state"]
    # Replaced in place (create or replace): same identity, so calls running during the
    # change finish instead of failing with "cache lookup failed for function".
    assert after["lock_wait"] == before["lock_wait"]
    body = admin.execute(
        "select prosrc from pg_proc where oid = %s", (after["lock_wait"],)
    ).fetchone()
    assert body is not None and ", 780)" in body[0]  # stall_timeout_ms - lock_probe_ms
    assert admin.execute(f"select count(*) from {q(names['feed'])}").fetchone() == (1,)


def test_upgrade_replaces_routines_and_an_old_protocol_version_asks_for_it(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    create_table(admin, "cf_upgrade", "orders", "order_id bigint primary key")
    teardown_feed(dbt, "cf_upgrade", "orders")
    with pytest.raises(DbtError, match="is not set up, so there is nothing to upgrade"):
        upgrade_feed(dbt, "cf_upgrade", "orders", "blocking")
    setup_feed(dbt, "cf_upgrade", "orders", "blocking")
    names = _feed_names(admin, "cf_upgrade.orders")
    admin.execute(
        "update changefeed.feeds set protocol_version = 0 where feed_id = 'cf_upgrade.orders'"
    )
    with pytest.raises(
        DbtError,
        match=r"set up with protocol version 0 .* run `dbt run-operation changefeed.upgrade_feed",
    ):
        setup_feed(dbt, "cf_upgrade", "orders", "blocking")
    before = object_oids(admin, names)
    versions = _catalog_versions(admin, before)
    # A write locked before the upgrade allocated its block the protocol 1 way as far as the
    # new update_state knows: the upgrade abandons it, and its commit fails with CF001.
    feed = PostgresFeed("cf_upgrade.orders")
    with connect(pg_uri) as conn, pytest.raises(WriteAbandoned), feed.write(conn, 0) as w:
        w.insert_events([(1,)])
        upgrade_feed(dbt, "cf_upgrade", "orders", "blocking")
    after = object_oids(admin, names)
    assert after == before  # same identities: in-flight calls survive an upgrade
    assert _catalog_versions(admin, after)["read_feed"] != versions["read_feed"]  # rewritten
    assert registry_row(admin, "cf_upgrade.orders")["protocol_version"] == 3  # type: ignore[index]
    assert "nothing to do" in setup_feed(dbt, "cf_upgrade", "orders", "blocking")[0]
    with pytest.raises(DbtError, match="registered with mode blocking"):
        upgrade_feed(dbt, "cf_upgrade", "orders", "outbox")


def test_key_errors_name_the_table_and_the_remedy(dbt: Any, admin: psycopg.Connection[Any]) -> None:
    create_table(admin, "cf_keys", "no_pk", "a bigint, b text")
    with pytest.raises(
        DbtError, match=r"cf_keys.no_pk has no primary key.*key: \[\.\.\.\] \(columns: a, b\)"
    ):
        setup_feed(dbt, "cf_keys", "no_pk", "outbox")
    with pytest.raises(
        DbtError,
        match=re.escape("key column 'c' is not a column of cf_keys.no_pk; its columns are: a, b"),
    ):
        setup_feed(dbt, "cf_keys", "no_pk", "outbox", key=["c"])
    with pytest.raises(DbtError, match=re.escape("table cf_keys.missing does not exist")):
        setup_feed(dbt, "cf_keys", "missing", "outbox", key=["a"])
    assert registry_row(admin, "cf_keys.no_pk") is None


def test_concurrent_setups_leave_exactly_one_feed(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """Two setups of one feed at once (the setup statement dbt runs, from two threads)."""
    create_table(admin, "cf_race", "orders", "order_id bigint primary key")
    teardown_feed(dbt, "cf_race", "orders")
    spec = (
        SPEC.replace("cf_render.t", "cf_race.orders")
        .replace("'cf_render'", "'cf_race'")
        .replace("'t'", "'orders'")
    )
    blocking_sql, outbox_sql = dbt.render_many(
        [
            "{% set s = " + spec.replace("MODE", mode) + " %}"
            "{{ changefeed._postgres_sql_setup(s, changefeed._postgres_feed_context(s),"
            " changefeed._postgres_key_signature(s['keys']),"
            " changefeed._postgres_feed_options(s)) }}"
            for mode in ("'blocking'", "'outbox'")
        ],
        "postgres",
    )

    assert race(lambda: connect(pg_uri), [blocking_sql, blocking_sql]) == [None, None]
    names = _feed_names(admin, "cf_race.orders")
    assert admin.execute(
        "select count(*) from changefeed.feeds where feed_id = 'cf_race.orders'"
    ).fetchone() == (1,)
    assert "feed" in object_oids(admin, names)

    teardown_feed(dbt, "cf_race", "orders")
    results = race(lambda: connect(pg_uri), [blocking_sql, outbox_sql])
    failures = [r for r in results if r is not None]
    assert len(failures) == 1, results
    assert failures[0].sqlstate == "CF008"  # type: ignore[attr-defined]
    assert "is registered with mode" in str(failures[0])
    row = registry_row(admin, "cf_race.orders")
    assert row is not None
    winner = row["mode"]
    assert ("outbox" in object_oids(admin, row["names"])) == (winner == "outbox")
    teardown_feed(dbt, "cf_race", "orders")


def test_teardown_leaves_nothing(dbt: Any, admin: psycopg.Connection[Any], pg_uri: str) -> None:
    create_table(admin, "cf_teardown", "items", "sku text primary key")
    teardown_feed(dbt, "cf_teardown", "items")
    setup_feed(dbt, "cf_teardown", "items", "outbox")
    names = _feed_names(admin, "cf_teardown.items")
    feed = PostgresFeed("cf_teardown.items")
    with connect(pg_uri) as conn:
        with conn.transaction():
            feed.insert_outbox(conn, 0, [("a",)])
        feed.read_page(conn, 0)
    assert len(object_oids(admin, names)) == len(names) - 1  # all but the GUC

    assert teardown_feed(dbt, "cf_teardown", "items") == [
        "changefeed: feed cf_teardown.items torn down"
    ]
    assert object_oids(admin, names) == {}
    assert registry_row(admin, "cf_teardown.items") is None
    leftovers = admin.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'changefeed' and c.relname like %s "
        "union all select proname from pg_proc where proname like %s",
        ("%cf_teardown.items%", "%cf_teardown.items%"),
    ).fetchall()
    assert leftovers == []
    assert admin.execute("select count(*) from cf_teardown.items").fetchone() == (0,)  # source kept
    logged = teardown_feed(dbt, "cf_teardown", "items")
    assert "was not registered" in logged[0]


def test_a_shortened_name_held_by_another_feed_is_refused(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    create_table(admin, "cf_clash", "orders", "order_id bigint primary key")
    teardown_feed(dbt, "cf_clash", "orders")
    admin.execute(
        "insert into changefeed.feeds (feed_id, source_database, source_schema, source_table,"
        " source_relation, mode, key_signature, keys, options, names, protocol_version)"
        " values ('cf_clash.other', 'postgres', 'cf_clash', 'other', 'x', 'blocking', 'k', '[]',"
        " '{}', '{\"feed\": \"feed:cf_clash.orders\"}', 1)"
    )
    try:
        with pytest.raises(
            DbtError,
            match=re.escape(
                '"feed:cf_clash.orders" that the feed cf_clash.orders needs'
                " is already used by the feed cf_clash.other"
            ),
        ):
            setup_feed(dbt, "cf_clash", "orders", "blocking")
        assert registry_row(admin, "cf_clash.orders") is None
        assert object_oids(admin, {"state": "state:cf_clash.orders"}) == {}  # all or nothing
    finally:
        admin.execute("delete from changefeed.feeds where feed_id = 'cf_clash.other'")


# -- hostile and long names ----------------------------------------------------------------

LONG_ASCII = "t" * 63
LONG_UTF8 = "é" * 31 + "x"  # 63 bytes, 32 characters
HOSTILE = [
    ("cf hostile", 'we"ird', '"quoted" key', "outbox"),
    ("cf;hostile", "br[ack]et; drop table x", "select", "blocking"),
    ("select", "with space", "a'b\\c", "outbox"),
    ("schéma", "ünïcödé", "ключ", "blocking"),
    ("cf_long", LONG_ASCII, "k" * 63, "outbox"),
    ("cf_long", LONG_UTF8, "ü" * 31, "blocking"),
    ("cf$cf$", "$cf$ dollar", "$cfsetup$", "blocking"),
]


@pytest.mark.parametrize(("schema", "table", "key", "mode"), HOSTILE)
def test_hostile_names_work_end_to_end(
    dbt: Any,
    admin: psycopg.Connection[Any],
    pg_uri: str,
    schema: str,
    table: str,
    key: str,
    mode: str,
) -> None:
    create_table(
        admin, schema, table, f'"{key.replace(chr(34), chr(34) * 2)}" text primary key, n int'
    )
    feed_id = f"{schema}.{table}"
    teardown_feed(dbt, schema, table)
    setup_feed(dbt, schema, table, mode)
    names = _feed_names(admin, feed_id)
    for kind, name in names.items():
        assert len(name.encode()) <= 63, (kind, name)
        if kind not in ("guc", "writer_role", "reader_role"):
            assert name == shortened(kind, feed_id)
    assert names["writer_role"] == shortened("changefeed_writer", f"postgres.{feed_id}")

    feed = PostgresFeed(feed_id)
    with connect(pg_uri) as conn:
        if mode == "blocking":
            with feed.write(conn, 3) as w:
                w.insert_events([("v'1",), ("v;2",)])
        else:
            with conn.transaction():
                feed.insert_outbox(conn, 3, [("v'1",), ("v;2",)])
        page = feed.read_page(conn, 3)
    assert [e.key for e in page.events] == [("v'1",), ("v;2",)]
    assert teardown_feed(dbt, schema, table)[0].endswith("torn down")
    assert object_oids(admin, names) == {}


# -- roles -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def role_feeds(dbt: Any, admin: psycopg.Connection[Any]) -> dict[str, dict[str, str]]:
    create_table(admin, "cf_roles", "orders", "order_id bigint primary key")
    create_table(admin, "cf_roles", "items", "sku text primary key")
    teardown_feed(dbt, "cf_roles", "orders")
    teardown_feed(dbt, "cf_roles", "items")
    setup_feed(dbt, "cf_roles", "orders", "blocking")
    setup_feed(dbt, "cf_roles", "items", "outbox")
    return {
        "blocking": _feed_names(admin, "cf_roles.orders"),
        "outbox": _feed_names(admin, "cf_roles.items"),
    }


def _denied(conn: psycopg.Connection[Any], statement: str) -> None:
    with pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement)


def test_blocking_writer_writes_but_cannot_read_or_change_state(
    role_feeds: dict[str, dict[str, str]], pg_uri: str
) -> None:
    n = role_feeds["blocking"]
    feed = PostgresFeed("cf_roles.orders")
    with connect(pg_uri) as conn, as_role(conn, n["writer_role"]):
        with feed.write(conn, 1) as w:  # lock, ulid, update_state as the writer
            w.insert_events([(10,)])
        conn.autocommit = True
        for statement in [
            f"select * from {q(n['feed'])}",
            f"select * from {q(n['state'])}",
            f"select * from {q(n['session'])}",
            f"update {q(n['state'])} set generation = generation + 1",
            f"delete from {q(n['feed'])}",
            f"select * from {q(n['read_feed'])}(1)",
            f"select {q(n['tombstone'])}(1, 1, 1)",
        ]:
            _denied(conn, statement)
    with connect(pg_uri) as conn:
        assert [e.key for e in feed.read_page(conn, 1).events] == [(10,)]


def test_blocking_reader_reads_but_cannot_write(
    role_feeds: dict[str, dict[str, str]], pg_uri: str
) -> None:
    n = role_feeds["blocking"]
    feed = PostgresFeed("cf_roles.orders")
    with connect(pg_uri) as conn, as_role(conn, n["reader_role"]):
        feed.read_page(conn, 1)
        feed.safe_point(conn, 1)
        feed.barrier_wait(conn, 1, timeout_s=5)
        conn.execute(f"select * from {q(n['feed'])}")
        shards = [r[0] for r in conn.execute(f"select * from {q(n['shards'])}()")]
        assert 1 in shards and shards == sorted(shards)
        for statement in [
            f"insert into {q(n['feed'])} (shard_id, ulid, order_id) values (1, '\\x00', 1)",
            f"update {q(n['state'])} set generation = 0",
            f"select * from {q(n['state'])}",
            f"call {q(n['lock'])}(1)",
            f"select {q(n['update_state'])}()",
            f"select nextval('{q(n['sequence'])}')",
        ]:
            _denied(conn, statement)


def test_outbox_roles(role_feeds: dict[str, dict[str, str]], pg_uri: str) -> None:
    n = role_feeds["outbox"]
    feed = PostgresFeed("cf_roles.items")
    with connect(pg_uri) as conn, as_role(conn, n["writer_role"]):
        with conn.transaction():
            feed.insert_outbox(conn, 2, [("a",)])
        for statement in [
            f"insert into {q(n['outbox'])} (shard_id, txid, sku) values (2, '1', 'b')",
            f"select * from {q(n['outbox'])}",
            f"select * from {q(n['feed'])}",
            f"call {q(n['move_outbox'])}(2)",
            f"select * from {q(n['shards'])}()",
        ]:
            _denied(conn, statement)
    with connect(pg_uri) as conn, as_role(conn, n["reader_role"]):
        # Shard 2 has no state row yet, only an unmoved outbox row: it is listed all the same.
        assert [r[0] for r in conn.execute(f"select * from {q(n['shards'])}()")] == [2]
        assert [e.key for e in feed.read_page(conn, 2).events] == [("a",)]
        _denied(conn, f"insert into {q(n['outbox'])} (shard_id, sku) values (2, 'c')")
        _denied(conn, f"delete from {q(n['feed'])}")


def test_public_cannot_execute_the_routines(
    role_feeds: dict[str, dict[str, str]], admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    admin.execute("drop role if exists cf_nobody")
    admin.execute("create role cf_nobody")
    admin.execute("grant usage on schema changefeed to cf_nobody")
    n = role_feeds["blocking"]
    try:
        with connect(pg_uri) as conn, as_role(conn, "cf_nobody"):
            _denied(conn, f"select * from {q(n['read_feed'])}(1)")
            _denied(conn, f"select {q(n['ulid'])}(1)")
            _denied(conn, f"call {q(n['lock'])}(1)")
    finally:
        admin.execute("revoke usage on schema changefeed from cf_nobody")
        admin.execute("drop role cf_nobody")


def test_a_setup_never_drops_capture_or_row_images_unsaid(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    """Setting a capture: trigger feed up again without `capture` fails and changes
    nothing; `capture: none` said drops it, and the log lists what changed (issue "Sources
    change", item 3). The same for row images."""
    create_table(admin, "cf_stated", "items", "item_id bigint primary key, qty int")
    teardown_feed(dbt, "cf_stated", "items")
    setup_feed(dbt, "cf_stated", "items", "outbox", capture="trigger", row_image=True)
    triggers = "select count(*) from pg_trigger where tgrelid = 'cf_stated.items'::regclass"
    assert admin.execute(triggers).fetchone() == (4,)
    with pytest.raises(DbtError) as unsaid:
        setup_feed(dbt, "cf_stated", "items", "outbox", stall_timeout_ms=800)
    message = str(unsaid.value)
    assert "setup_feed of cf_stated.items would drop what its arguments leave out" in message
    assert "capture: trigger (shard 0); pass capture: none" in message
    assert "row_image: true; pass row_image: false" in message
    row = registry_row(admin, "cf_stated.items")
    assert row is not None and row["options"]["capture"] == "trigger"
    assert row["options"]["stall_timeout_ms"] == 5000 and row["options"]["row_image"] is True
    assert admin.execute(triggers).fetchone() == (4,)
    with pytest.raises(DbtError, match="row_image: true; pass row_image: false"):
        setup_feed(dbt, "cf_stated", "items", "outbox", capture="trigger")

    logged = setup_feed(dbt, "cf_stated", "items", "outbox", capture="none", row_image=False)
    updated = [m for m in logged if "cf_stated.items updated" in m]
    assert updated and "changed: capture trigger -> unset, row_image true -> unset" in updated[0]
    assert "shard 0 -> unset" in updated[0]
    assert admin.execute(triggers).fetchone() == (0,)
    row = registry_row(admin, "cf_stated.items")
    assert row is not None and "capture" not in row["options"]
