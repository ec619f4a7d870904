"""Outbox mode with ``capture: trigger`` on the embedded PostgreSQL 16 server: the source
table's statement triggers write the outbox rows inside the writer's own statement.

Covers: insert, update (with and without a key or shard change), delete, multi-row
statements and rollbacks give exactly the right outbox rows and, after ``move_outbox``,
events (one block per source transaction); TRUNCATE is refused; a writer with rights on
the source table only writes through the trigger; a bad shard expression fails at setup,
naming it; setup twice is a no-op; a rebuilt table gets its triggers back; changing
capture or shard is applied in place, all or nothing; teardown removes the triggers;
hostile names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from tests.support.dbt_harness import DbtError
from tests.support.pg_feeds import (
    as_role,
    block_of,
    connect,
    create_table,
    q,
    registry_row,
    setup_feed,
    teardown_feed,
    upgrade_feed,
)

from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

TRIGGER_KINDS = ("capture_insert", "capture_update", "capture_delete", "capture_truncate")


def source(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def triggers(conn: psycopg.Connection[Any], schema: str, table: str) -> dict[str, str]:
    """name -> the function it calls, of the (non-internal) triggers on schema.table."""
    rows = conn.execute(
        "select t.tgname, t.tgfoid::regproc::text from pg_trigger t "
        "join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = %s and c.relname = %s and not t.tgisinternal",
        (schema, table),
    ).fetchall()
    return dict(rows)


def outbox_rows(conn: psycopg.Connection[Any], names: dict[str, str]) -> list[tuple[Any, ...]]:
    """(shard_id, key..., txid) of the outbox rows, in order."""
    return [
        tuple(r)
        for r in conn.execute(
            f"select shard_id, order_id, txid::text from {q(names['outbox'])} "
            "order by order_sequence"
        ).fetchall()
    ]


@pytest.fixture
def orders(dbt: Any, admin: psycopg.Connection[Any]) -> Iterator[dict[str, str]]:
    """shop-like source `cf_capture.orders` with an outbox feed captured by trigger,
    sharded by customer: the registered names."""
    create_table(
        admin, "cf_capture", "orders",
        "order_id bigint primary key, customer_id int not null, note text",
    )  # fmt: skip
    teardown_feed(dbt, "cf_capture", "orders")
    logged = setup_feed(
        dbt, "cf_capture", "orders", "outbox", capture="trigger", shard="customer_id % 4"
    )
    assert any("created (outbox" in m and "capture: trigger, shard customer_id % 4" in m
               for m in logged), logged  # fmt: skip
    row = registry_row(admin, "cf_capture.orders")
    assert row is not None
    yield dict(row["names"])
    teardown_feed(dbt, "cf_capture", "orders")


def test_setup_registers_capture_and_creates_the_triggers(
    orders: dict[str, str], admin: psycopg.Connection[Any], dbt: Any
) -> None:
    row = registry_row(admin, "cf_capture.orders")
    assert row is not None
    assert row["options"] == {"stall_timeout_ms": 5000, "lock_probe_ms": 20, "block_bits": 36,
                              "capture": "trigger", "shard": "customer_id % 4"}  # fmt: skip
    function = f'changefeed."{orders["capture"]}"'
    assert orders["capture"] == "capture:cf_capture.orders"
    assert orders["capture_insert"] == "capture_insert:changefeed.cf_capture.orders"
    assert triggers(admin, "cf_capture", "orders") == {orders[k]: function for k in TRIGGER_KINDS}
    config = admin.execute(
        "select prosecdef, proconfig from pg_proc where oid = %s::regproc", (function,)
    ).fetchone()
    assert config == (True, ["search_path=pg_catalog, pg_temp"])
    # statement-level, with transition tables (tgtype bit 0 = row)
    kinds = admin.execute(
        "select tgname, tgtype & 1, tgoldtable, tgnewtable from pg_trigger "
        "where tgrelid = 'cf_capture.orders'::regclass order by tgname"
    ).fetchall()
    assert kinds == [
        (orders["capture_delete"], 0, "cf_old", None),
        (orders["capture_insert"], 0, None, "cf_new"),
        (orders["capture_truncate"], 0, None, None),
        (orders["capture_update"], 0, "cf_old", "cf_new"),
    ]
    # A second setup with the same config does nothing and takes no lock on the table.
    assert setup_feed(
        dbt, "cf_capture", "orders", "outbox", capture="trigger", shard="customer_id % 4"
    ) == ["changefeed: feed cf_capture.orders is already set up (outbox); nothing to do"]


def test_every_change_becomes_exactly_its_outbox_rows_and_events(
    orders: dict[str, str], pg_uri: str
) -> None:
    feed = PostgresFeed("cf_capture.orders")
    with connect(pg_uri) as conn:
        txids = []

        def txn(*statements: str) -> None:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
                row = conn.execute("select pg_current_xact_id()::text").fetchone()
                assert row is not None
                txids.append(row[0])

        txn("insert into cf_capture.orders values (1, 5, 'a')")  # shard 1
        txn("insert into cf_capture.orders values (2, 6, 'b'), (3, 9, 'c')",  # shards 2, 1
            "update cf_capture.orders set note = 'b2' where order_id = 2")  # fmt: skip
        txn("update cf_capture.orders set order_id = 4 where order_id = 1")  # key change
        txn("update cf_capture.orders set customer_id = 7 where order_id = 3")  # shard 1 -> 3
        txn("delete from cf_capture.orders where order_id = 2")
        with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
            conn.execute("insert into cf_capture.orders values (10, 1, 'x')")
            conn.execute("insert into cf_capture.orders values (10, 1, 'dup')")
        with conn.transaction():
            conn.execute("insert into cf_capture.orders values (11, 1, 'rolled back')")
            conn.execute("update cf_capture.orders set note = 'rolled back'")
            raise_rollback(conn)
        t1, t2, t3, t4, t5 = txids
        assert sorted(outbox_rows(conn, orders)) == sorted([
            (1, 1, t1),
            (2, 2, t2), (1, 3, t2), (2, 2, t2),   # the update of order 2: one row, key unchanged
            (1, 1, t3), (1, 4, t3),               # old key and new key
            (1, 3, t4), (3, 3, t4),               # old shard and new shard
            (2, 2, t5),
        ])  # fmt: skip

        events = {}
        for shard in range(4):
            feed.move_outbox(conn, shard)
            events[shard] = feed.read_page(conn, shard).events
        # One block per source transaction and shard (O2), in commit order; the order of
        # the rows of one statement within its block is the statement's.
        assert {s: by_block(ev) for s, ev in events.items()} == {
            0: [],
            1: [[(1,)], [(3,)], [(1,), (4,)], [(3,)]],
            2: [[(2,), (2,)], [(2,)]],
            3: [[(3,)]],
        }


def by_block(events: list[Any]) -> list[list[tuple[Any, ...]]]:
    """The events' keys grouped by block, each group sorted."""
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for event in events:
        groups.setdefault(block_of(event.ulid), []).append(event.key)
    return [sorted(keys) for keys in groups.values()]


def raise_rollback(conn: psycopg.Connection[Any]) -> None:
    raise psycopg.Rollback()


def test_bulk_statements_keep_one_block_per_transaction(
    orders: dict[str, str], pg_uri: str
) -> None:
    feed = PostgresFeed("cf_capture.orders")
    with connect(pg_uri) as conn:
        conn.execute(
            "insert into cf_capture.orders select g, 0, 'bulk' from generate_series(1, 5000) g"
        )
        conn.execute("update cf_capture.orders set note = 'again'")
        conn.execute("delete from cf_capture.orders where order_id > 100")
        counts = conn.execute(
            f"select count(*), count(distinct txid) from {q(orders['outbox'])}"
        ).fetchone()
        assert counts == (5000 + 5000 + 4900, 3)
        feed.move_outbox(conn, 0, max_rows=100_000)
        events = feed.read_page(conn, 0, page_size=20_000).events
    assert len(events) == 14_900
    assert [len(keys) for keys in by_block(events)] == [5000, 5000, 4900]
    assert by_block(events)[0] == [(i,) for i in range(1, 5001)]


def test_truncate_is_refused(orders: dict[str, str], pg_uri: str) -> None:
    with connect(pg_uri) as conn:
        conn.execute("insert into cf_capture.orders values (1, 1, 'a')")
        with pytest.raises(psycopg.Error) as raised:
            conn.execute("truncate cf_capture.orders")
        assert raised.value.sqlstate == "CF009"
        assert 'TRUNCATE of "cf_capture"."orders" would remove rows without events' in str(
            raised.value
        )
        assert conn.execute("select count(*) from cf_capture.orders").fetchone() == (1,)


def test_a_writer_with_rights_on_the_source_only_writes_through_the_trigger(
    orders: dict[str, str], admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    admin.execute("drop role if exists cf_capture_app")
    admin.execute("create role cf_capture_app")
    admin.execute("grant usage on schema cf_capture to cf_capture_app")
    admin.execute("grant select, insert, update, delete on cf_capture.orders to cf_capture_app")
    feed = PostgresFeed("cf_capture.orders")
    try:
        with connect(pg_uri) as conn, as_role(conn, "cf_capture_app"):
            with conn.transaction():
                conn.execute("insert into cf_capture.orders values (1, 2, 'a')")
                conn.execute("update cf_capture.orders set note = 'b'")
                conn.execute("delete from cf_capture.orders")
            # it still cannot touch the feed's objects itself
            for statement in (
                f"select * from {q(orders['outbox'])}",
                f"insert into {q(orders['outbox'])} (shard_id, order_id) values (0, 1)",
                f"select {q(orders['capture'])}()",
            ):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(statement)
        with connect(pg_uri) as conn:
            feed.move_outbox(conn, 2)
            assert [e.key for e in feed.read_page(conn, 2).events] == [(1,), (1,), (1,)]
    finally:
        admin.execute("drop owned by cf_capture_app")
        admin.execute("drop role cf_capture_app")


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        (
            "customer % 4",
            r"shard expression customer % 4 of the feed cf_capture.bad does not work "
            r'on "cf_capture"."bad": column "customer" does not exist',
        ),
        (
            "note",
            r"shard expression note .* column \"shard_id\" is of type integer but expression "
            r"is of type text",
        ),
        (
            "public.cf_no_such(customer_id)",
            r"does not work on .* function "
            r"public.cf_no_such\(integer\) does not exist",
        ),
        ("0; drop table cf_capture.bad", r"the shard expression may not contain ;"),
        ("0) -- ", r"may not contain --"),
        ("0), (1", r"unbalanced parentheses"),
        ("'x", r"unbalanced parentheses or an unclosed quote"),
        ("", r"shard must be a SQL expression"),
    ],
)
def test_a_bad_shard_expression_fails_at_setup_and_creates_nothing(
    dbt: Any, admin: psycopg.Connection[Any], shard: str, message: str
) -> None:
    create_table(
        admin, "cf_capture", "bad", "order_id bigint primary key, customer_id int, note text"
    )
    teardown_feed(dbt, "cf_capture", "bad")
    with pytest.raises(DbtError, match=message):
        setup_feed(dbt, "cf_capture", "bad", "outbox", capture="trigger", shard=shard)
    assert registry_row(admin, "cf_capture.bad") is None
    assert triggers(admin, "cf_capture", "bad") == {}
    assert admin.execute(
        "select count(*) from pg_class where relname like '%cf_capture.bad%'"
    ).fetchone() == (0,)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capture": "trigger", "mode": "blocking"}, r"capture: trigger needs mode: outbox"),
        ({"capture": "cdc"}, r"capture must be one of none, trigger; got: cdc"),
        ({"shard": "customer_id % 4"}, r"shard is the shard expression of capture: trigger"),
    ],
)
def test_capture_options_are_validated(
    dbt: Any, admin: psycopg.Connection[Any], options: dict[str, str], message: str
) -> None:
    create_table(admin, "cf_capture", "opts", "order_id bigint primary key, customer_id int")
    args = {"mode": "outbox", **options}
    mode = args.pop("mode")
    with pytest.raises(DbtError, match=message):
        setup_feed(dbt, "cf_capture", "opts", mode, **args)
    assert registry_row(admin, "cf_capture.opts") is None


def test_capture_needs_a_table(dbt: Any, admin: psycopg.Connection[Any]) -> None:
    create_table(admin, "cf_capture", "base", "order_id bigint primary key")
    admin.execute("create or replace view cf_capture.v as select * from cf_capture.base")
    with pytest.raises(DbtError, match=r"capture: trigger needs an ordinary or partitioned table"):
        setup_feed(dbt, "cf_capture", "v", "outbox", key=["order_id"], capture="trigger")
    assert registry_row(admin, "cf_capture.v") is None


def test_changing_capture_and_shard_is_applied_in_place(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    create_table(admin, "cf_capture", "items", "sku text primary key, region int not null")
    teardown_feed(dbt, "cf_capture", "items")
    setup_feed(dbt, "cf_capture", "items", "outbox")
    assert triggers(admin, "cf_capture", "items") == {}
    names = dict(registry_row(admin, "cf_capture.items")["names"])  # type: ignore[index]
    assert "capture" not in names
    outbox = q(names["outbox"])

    def shards_of(statement: str) -> list[int]:
        with connect(pg_uri) as conn:
            conn.execute(f"delete from {outbox}")
            conn.execute(statement)
            return [r[0] for r in conn.execute(f"select shard_id from {outbox}").fetchall()]

    assert shards_of("insert into cf_capture.items values ('a', 3)") == []  # nothing captured

    logged = setup_feed(dbt, "cf_capture", "items", "outbox", capture="trigger")
    assert any("updated (outbox" in m for m in logged), logged
    assert len(triggers(admin, "cf_capture", "items")) == 4
    assert shards_of("insert into cf_capture.items values ('b', 3)") == [0]  # default shard 0

    setup_feed(dbt, "cf_capture", "items", "outbox", capture="trigger", shard="region")
    assert shards_of("insert into cf_capture.items values ('c', 3)") == [3]
    # A bad new expression leaves the previous one working (all or nothing).
    with pytest.raises(DbtError, match="does not work on"):
        setup_feed(dbt, "cf_capture", "items", "outbox", capture="trigger", shard="regio")
    assert shards_of("insert into cf_capture.items values ('d', 2)") == [2]
    assert registry_row(admin, "cf_capture.items")["options"]["shard"] == "region"  # type: ignore[index]

    # upgrade_feed re-creates the code with the registered capture, and refuses to change
    # it: an upgrade run with the old arguments must not switch capture off.
    for given, message in [
        ({}, "registered with capture: trigger, shard: region, but upgrade_feed was given "
             "capture: none. upgrade_feed keeps them"),
        ({"capture": "trigger", "shard": "region + 1"},
         "was given capture: trigger, shard: region + 1"),
    ]:  # fmt: skip
        with pytest.raises(DbtError, match=re.escape(message)):
            upgrade_feed(dbt, "cf_capture", "items", "outbox", **given)
    upgrade_feed(dbt, "cf_capture", "items", "outbox", capture="trigger", shard="region")
    assert len(triggers(admin, "cf_capture", "items")) == 4
    assert shards_of("insert into cf_capture.items values ('e', 2)") == [2]

    guard = (
        "select count(*) from pg_event_trigger "
        "where evtname = 'recapture_trigger:changefeed.cf_capture.items'"
    )
    assert admin.execute(guard).fetchone() == (1,)  # the guard of a capture: trigger feed

    # Back to capture: none only when said: left out, the setup refuses and keeps them.
    with pytest.raises(DbtError, match="would drop what its arguments leave out"):
        setup_feed(dbt, "cf_capture", "items", "outbox")
    assert len(triggers(admin, "cf_capture", "items")) == 4
    setup_feed(dbt, "cf_capture", "items", "outbox", capture="none")
    assert triggers(admin, "cf_capture", "items") == {}
    assert admin.execute(
        "select count(*) from pg_proc where proname in "
        "('capture:cf_capture.items', 'recapture:cf_capture.items')"
    ).fetchone() == (0,)
    assert admin.execute(guard).fetchone() == (0,)
    assert shards_of("insert into cf_capture.items values ('f', 2)") == []
    assert "capture" not in registry_row(admin, "cf_capture.items")["options"]  # type: ignore[index]
    teardown_feed(dbt, "cf_capture", "items")


def test_a_rebuilt_table_gets_its_triggers_back_and_teardown_removes_them(
    orders: dict[str, str], dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    columns = "order_id bigint primary key, customer_id int not null, note text"
    event_trigger = "select count(*) from pg_event_trigger where evtname = %s"
    assert admin.execute(event_trigger, (orders["recapture_trigger"],)).fetchone() == (1,)
    # Dropped and created again without setup: the event trigger puts the capture
    # triggers back in the creating command's transaction, before any write (5.1).
    create_table(admin, "cf_capture", "orders", columns)
    assert len(triggers(admin, "cf_capture", "orders")) == 4
    logged = setup_feed(
        dbt, "cf_capture", "orders", "outbox", capture="trigger", shard="customer_id % 4"
    )
    assert logged == [
        "changefeed: feed cf_capture.orders is already set up (outbox); nothing to do"
    ]

    # Without the event trigger (set up by a role that is not a superuser), the rebuilt
    # table stays without triggers until setup runs, which also creates the event trigger.
    admin.execute(
        sql.SQL("drop event trigger {}").format(sql.Identifier(orders["recapture_trigger"]))
    )
    create_table(admin, "cf_capture", "orders", columns)
    assert triggers(admin, "cf_capture", "orders") == {}
    logged = setup_feed(
        dbt, "cf_capture", "orders", "outbox", capture="trigger", shard="customer_id % 4"
    )
    assert logged == [
        "changefeed: feed cf_capture.orders: created the event trigger that captures "
        '"cf_capture"."orders" again when it is re-created without setup; re-created the '
        'capture function and triggers on "cf_capture"."orders" (the table was rebuilt or '
        "altered, or they were dropped or disabled)"
    ]
    assert len(triggers(admin, "cf_capture", "orders")) == 4
    assert admin.execute(event_trigger, (orders["recapture_trigger"],)).fetchone() == (1,)

    teardown_feed(dbt, "cf_capture", "orders")
    assert triggers(admin, "cf_capture", "orders") == {}
    for function in (orders["capture"], orders["recapture"]):
        assert admin.execute(
            "select count(*) from pg_proc where proname = %s", (function,)
        ).fetchone() == (0,)
    assert admin.execute(event_trigger, (orders["recapture_trigger"],)).fetchone() == (0,)
    admin.execute("truncate cf_capture.orders")  # allowed again


def test_teardown_after_the_source_table_is_gone(dbt: Any, admin: psycopg.Connection[Any]) -> None:
    create_table(admin, "cf_capture", "gone", "order_id bigint primary key")
    teardown_feed(dbt, "cf_capture", "gone")
    setup_feed(dbt, "cf_capture", "gone", "outbox", capture="trigger")
    admin.execute("drop table cf_capture.gone")
    assert teardown_feed(dbt, "cf_capture", "gone") == [
        "changefeed: feed cf_capture.gone torn down"
    ]
    assert admin.execute(
        "select count(*) from pg_proc where proname = 'capture:cf_capture.gone'"
    ).fetchone() == (0,)


HOSTILE = [
    ('cf cap"ture', 'we"ird; drop', '"k" $x$', 'abs(pg_catalog.hashtext("no""te x"::text)) % 3'),
    ("cf_cap", "é" * 28 + "x", "tg_op", "found"),  # long name; columns named like PL/pgSQL vars
]


@pytest.mark.parametrize(("schema", "table", "key", "shard_column"), HOSTILE)
def test_hostile_names(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str,
    schema: str, table: str, key: str, shard_column: str,
) -> None:  # fmt: skip
    ident = sql.Identifier
    admin.execute(sql.SQL("create schema if not exists {}").format(ident(schema)))
    admin.execute(sql.SQL("drop table if exists {}").format(source(schema, table)))
    other = 'no"te x' if shard_column.startswith("abs") else shard_column
    admin.execute(
        sql.SQL("create table {} ({} text primary key, {} int not null)").format(
            source(schema, table), ident(key), ident(other)
        )
    )
    teardown_feed(dbt, schema, table)
    shard = shard_column if shard_column.startswith("abs") else f'"{shard_column}" % 3'
    setup_feed(dbt, schema, table, "outbox", capture="trigger", shard=shard)
    feed = PostgresFeed(f"{schema}.{table}")
    with connect(pg_uri) as conn:
        conn.execute(
            sql.SQL("insert into {} values ('a''1', 7), ('b;2', 8)").format(source(schema, table))
        )
        expected = [r[0] for r in conn.execute(
            sql.SQL("select {} from {} order by 1").format(sql.SQL(shard), source(schema, table))
        ).fetchall()]  # fmt: skip
        keys = []
        for shard_id in sorted(set(expected)):
            feed.move_outbox(conn, shard_id)
            keys += [e.key for e in feed.read_page(conn, shard_id).events]
    assert sorted(keys) == [("a'1",), ("b;2",)]
    assert len(triggers(admin, schema, table)) == 4
    assert teardown_feed(dbt, schema, table)[0].endswith("torn down")
    assert triggers(admin, schema, table) == {}


def generated_names(conn: psycopg.Connection[Any], names: dict[str, str]) -> set[str]:
    """Every name the feed's generated routines bind in their queries, read from their
    source as setup created them (so a new alias is covered without a list here): table
    and column aliases, relation names, variables and parameters, and the image columns."""
    bodies = "\n".join(r[0] for r in conn.execute(
        "select p.prosrc from pg_catalog.pg_proc as p "
        "where p.pronamespace = 'changefeed'::regnamespace and p.proname = any(%s)",
        (list(names.values()),),
    ).fetchall())  # fmt: skip
    found = set(re.findall(r"\bas\s+([a-z_][a-z0-9_]*)", bodies))
    for listed in re.findall(r"\bas\s+[a-z_][a-z0-9_]*\s*\(([a-z0-9_, ]+)\)", bodies):
        found |= {name.strip() for name in listed.split(",")}
    found |= set(re.findall(r"\b(?:from|join)\s+([a-z_][a-z0-9_]*)\b", bodies))
    found |= set(re.findall(r"\b([vp]_[a-z0-9_]+)\b", bodies))
    return found | {"row_image", "row_deleted", "cf_new", "cf_old"}


@pytest.mark.parametrize("row_image", [False, True], ids=["keys", "images"])
def test_source_columns_named_like_the_generated_sql(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str, row_image: bool
) -> None:
    """No column name of the source changes what the capture means: a source whose key is
    named like the old-row alias (o), whose shard column like the mover's (b), and with a
    column for every other name the generated routines bind (n, the new-row alias, among
    them), NULLs included, captures every change with the right keys and images."""
    schema, table = "cf_capture", f"aliased_{row_image}".lower()
    src = source(schema, table)
    create_table(admin, schema, table, 'o bigint primary key, "b" int not null')
    teardown_feed(dbt, schema, table)
    options = {"capture": "trigger", "shard": '"b" % 2', "row_image": row_image}
    setup_feed(dbt, schema, table, "outbox", **options)
    names = dict((registry_row(admin, f"{schema}.{table}") or {})["names"])
    columns = sorted(generated_names(admin, names) - {"o", "b"})
    assert {"n", "o", "b", "f", "t", "st", "row_image"} <= {*columns, "o", "b"}, columns
    for column in columns:
        admin.execute(
            sql.SQL("alter table {} add column {} text").format(src, sql.Identifier(column))
        )
    setup_feed(dbt, schema, table, "outbox", **options)  # its check runs over these columns

    def rows() -> dict[int, Any]:
        query = sql.SQL("select t.o, pg_catalog.to_jsonb(t.*) from {} as t").format(src)
        return dict(admin.execute(query).fetchall())

    every = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    values = sql.SQL(", ").join(sql.Literal(f"v {c}") for c in columns)
    nulls = sql.SQL(", ").join(sql.SQL("null::text") for _ in columns)
    insert = "insert into {} (o, b, {}) select 1, 1, {} union all select 2, 0, {}"
    admin.execute(sql.SQL(insert).format(src, every, values, nulls))
    inserted = rows()
    admin.execute(sql.SQL("update {} set ({}) = (select {}) where o = 1").format(src, every, nulls))
    updated = rows()
    admin.execute(sql.SQL("update {} set o = 3 where o = 2").format(src))
    moved = rows()
    admin.execute(sql.SQL("delete from {} where o = 1").format(src))
    expected = {
        1: [(1, inserted[1], False), (1, updated[1], False), (1, None, True)],
        0: [(2, inserted[2], False), (2, None, True), (3, moved[3], False)],
    }
    feed = PostgresFeed(f"{schema}.{table}")
    with connect(pg_uri) as conn:
        for shard, events in expected.items():
            feed.move_outbox(conn, shard)
            got = [(e.key[0], e.image, e.deleted) for e in feed.read_page(conn, shard).events]
            if not row_image:
                events = [(key, None, None) for key, _, _ in events]
            assert sorted(got, key=repr) == sorted(events, key=repr), shard
    teardown_feed(dbt, schema, table)


def test_without_a_trigger_insert_outbox_rides_in_the_writers_pipeline(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """docs/postgres.md: a writer that cannot use a trigger sends its statement,
    insert_outbox and the commit in one pipeline (insert_outbox reads no result)."""
    create_table(admin, "cf_capture", "piped", "order_id bigint primary key")
    teardown_feed(dbt, "cf_capture", "piped")
    setup_feed(dbt, "cf_capture", "piped", "outbox")
    feed = PostgresFeed("cf_capture.piped")
    with connect(pg_uri) as conn:
        feed.info(conn)  # names are read once, outside the pipeline
        with conn.pipeline(), conn.transaction():
            conn.execute("insert into cf_capture.piped values (1), (2)")
            feed.insert_outbox(conn, 0, [(1,), (2,)])
        assert [e.key for e in feed.read_page(conn, 0).events] == [(1,), (2,)]
    teardown_feed(dbt, "cf_capture", "piped")
