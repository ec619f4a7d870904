"""Hardening of PostgreSQL feeds against misuse found in acceptance testing: routines that
run with the caller's rights use only qualified operators and functions, public routines
refuse null or malformed arguments, the bookkeeping tables stay bounded, blocking writers
cannot publish outside their block, and schema changes under capture: trigger stop writes
instead of capturing wrong keys.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from tests.support.pg_feeds import (
    RENDER_SPEC,
    as_role,
    connect,
    create_table,
    registry_row,
    setup_feed,
    teardown_feed,
)

from changefeed.client import (
    Barrier,
    CaptureLost,
    InvalidArgument,
    NoWriteInProgress,
    PostgresFeed,
    WriteAbandoned,
    WriteOutsideBlock,
)
from changefeed.client.errors import translate

pytestmark = pytest.mark.postgres

CAPTURE = "'protocol_version': 3, 'capture': 'trigger', 'shard': '(id % 3)'"

# Words that look like calls but are SQL or PL/pgSQL syntax, not function lookups.
_SYNTAX = frozenset(
    [
        "coalesce",
        "nullif",
        "greatest",
        "least",
        "exists",
        "in",
        "any",
        "all",
        "values",
        "array",
        "and",
        "or",
        "not",
        "then",
        "else",
        "when",
        "if",
        "elsif",
        "return",
        "select",
        "from",
        "where",
        "using",
        "into",
        "as",
        "perform",
        "raise",
        "exception",
        "loop",
        "row",
        "is",
        "null",
        "case",
    ]
)


def _routine_bodies(text: str) -> list[tuple[str, str]]:
    """(header, body) of every routine created by the rendered statements."""
    out = []
    for statement in text.split("\n;;\n"):
        head = re.match(r"\s*create or replace (function|procedure) (\S+?)\(", statement)
        if head is None:
            continue
        tag = re.search(r"\nas (\$[a-z0-9]*\$)\n", statement)
        assert tag is not None, statement[:200]
        header = statement[: tag.start()]
        body = statement[tag.end() : statement.rindex(tag.group(1))]
        out.append((header, body))
    return out


def _unqualified(body: str) -> list[str]:
    """Operators and function calls that the caller's search_path could resolve."""
    code = re.sub(r"--[^\n]*", " ", body)
    code = re.sub(r"E?'(?:[^']|'')*'", " '' ", code)  # string literals
    quoted = r'"(?:[^"]|"")*"'
    code = re.sub(quoted + r"\s*\.\s*" + quoted, " cf_qualified ", code)
    code = re.sub(quoted, " cf_quoted ", code)
    code = re.sub(r"operator\(pg_catalog\.[^)\s]+\)", " ", code, flags=re.I)
    found = []
    # RAISE ... USING x = ... and GET DIAGNOSTICS v = item are syntax, not operators.
    syntax = re.sub(r"\b(errcode|message|hint|detail)\s*=", " ", code)
    syntax = re.sub(r"\bdiagnostics\s+\w+\s*=", " ", syntax)
    syntax = syntax.replace(":=", " ").replace("::", " ")
    found += re.findall(r"[-+*/<>=~!@#%^&|`?]+", syntax)
    # Constructs that look up `=` (or another operator) by name, like a bare operator.
    found += re.findall(r"\b(?:distinct\s+from|between|i?like|similar\s+to|in\s*\()", code, re.I)
    for name in re.findall(r"(?<![.\w])([A-Za-z_]\w*)\s*\(", code):
        if name.lower() not in _SYNTAX and name != "cf_qualified":
            found.append(name + "(")
    return found


def test_caller_rights_routines_qualify_every_operator_and_function(dbt: Any) -> None:
    """A routine without a pinned search_path (lock, ulid: SECURITY INVOKER for speed or
    because it commits) resolves names through the caller's search_path: every operator
    must be OPERATOR(pg_catalog.x) and every function schema-qualified."""
    rendered = dbt.render_many(
        [
            "{% for s in changefeed._postgres_feed_statements("
            + spec
            + ") %}{{ s }}\n;;\n{% endfor %}"
            for spec in (
                RENDER_SPEC.replace("MODE", "'blocking'"),
                RENDER_SPEC.replace("MODE", "'outbox'").replace("'protocol_version': 3", CAPTURE),
            )
        ],
        "postgres",
    )
    checked = []
    for text in rendered:
        for header, body in _routine_bodies(text):
            if "set search_path = pg_catalog, pg_temp" in header:
                continue
            assert "security definer" not in header
            checked.append(header.split("(")[0].split('"changefeed".')[-1])
            assert _unqualified(body) == [], (header.splitlines()[0], _unqualified(body))
    assert {'"lock:cf_render.t"', '"ulid:cf_render.t"'} <= set(checked), checked


EVIL_OPERATORS = [
    ("=", "text", "boolean"),
    ("<>", "text", "boolean"),
    ("||", "text", "text"),
    ("||", "bytea", "bytea"),
    ("=", "bigint", "boolean"),
    ("<>", "bigint", "boolean"),
    ("<", "bigint", "boolean"),
    (">=", "bigint", "boolean"),
    ("+", "bigint", "bigint"),
    ("-", "bigint", "bigint"),
]


def test_a_callers_own_operators_never_run_inside_lock_or_ulid(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """A writer whose search_path puts its own schema before pg_catalog, holding exact-match
    operators there, writes through lock, ulid and update_state without running them."""
    create_table(admin, "cf_hard", "evil", "order_id bigint primary key")
    teardown_feed(dbt, "cf_hard", "evil")
    setup_feed(dbt, "cf_hard", "evil", "blocking")
    row = registry_row(admin, "cf_hard.evil")
    assert row is not None
    names = row["names"]
    admin.execute("drop schema if exists cf_evil_ops cascade")
    admin.execute("drop role if exists cf_evil")
    admin.execute("create role cf_evil")
    admin.execute(f'grant "{names["writer_role"]}" to cf_evil')
    admin.execute("create schema cf_evil_ops authorization cf_evil")
    with as_role(admin, "cf_evil"):
        for i, (op, arg, result) in enumerate(EVIL_OPERATORS):
            admin.execute(
                f"create function cf_evil_ops.f{i}({arg}, {arg}) returns {result} language plpgsql "
                "as $$begin raise exception 'cf_evil operator ran'; end$$"
            )
            admin.execute(
                f"create operator cf_evil_ops.{op} (leftarg = {arg}, rightarg = {arg}, "
                f"function = cf_evil_ops.f{i})"
            )
    feed = PostgresFeed("cf_hard.evil")
    try:
        with connect(pg_uri) as conn:
            feed.info(conn)  # the client reads the registry with the default search_path
            conn.execute("set role cf_evil")
            conn.execute("set search_path = cf_evil_ops, pg_catalog")
            # The trap works: an unqualified operator in this session runs the role's own.
            with pytest.raises(psycopg.errors.RaiseException, match="cf_evil operator ran"):
                conn.execute("select 1::bigint < 2::bigint")
        with connect(pg_uri) as conn:
            feed.info(conn)
            conn.execute("set role cf_evil")
            conn.execute("set search_path = cf_evil_ops, pg_catalog")
            with feed.write(conn, 0) as w:
                assert w.insert_events([(1,), (2,)]) == 2
        with connect(pg_uri) as conn:
            keys = conn.execute(f'select order_id from changefeed."{names["feed"]}" order by ulid')
            assert [k for (k,) in keys] == [1, 2]
    finally:
        admin.execute("drop schema cf_evil_ops cascade")
        admin.execute("drop owned by cf_evil")
        admin.execute("drop role cf_evil")


# -- capture: trigger and schema changes ---------------------------------------------------


CAP = {"key": ["id"], "capture": "trigger", "shard": "region % 2"}


@pytest.fixture
def captured(dbt: Any, admin: psycopg.Connection[Any]) -> Iterator[PostgresFeed]:
    """cf_hard.cap, an outbox feed captured by trigger and sharded by `region`."""
    create_table(admin, "cf_hard", "cap", "id bigint primary key, other bigint, region int")
    teardown_feed(dbt, "cf_hard", "cap")
    setup_feed(dbt, "cf_hard", "cap", "outbox", **CAP)
    yield PostgresFeed("cf_hard.cap")
    teardown_feed(dbt, "cf_hard", "cap")


@contextmanager
def _sqlstate(code: str) -> Iterator[pytest.ExceptionInfo[psycopg.Error]]:
    with pytest.raises(psycopg.Error) as info:
        yield info
    assert info.value.sqlstate == code, info.value


def _keys(conn: psycopg.Connection[Any], feed: PostgresFeed, shard: int) -> list[Any]:
    return [e.key for e in feed.read_page(conn, shard, page_size=1000).events]


def test_swapped_or_retyped_captured_columns_stop_writes_until_setup_runs(
    captured: PostgresFeed, dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    admin.execute("insert into cf_hard.cap values (1, 10, 0)")
    # Swap the names of the key and another column: by name, the key is now the column
    # that held 10, 20, ...; a plan over the transition table would still read the old one.
    admin.execute(
        "alter table cf_hard.cap rename column id to tmp;"
        "alter table cf_hard.cap rename column other to id;"
        "alter table cf_hard.cap rename column tmp to other"
    )
    with _sqlstate("CF010") as info:
        admin.execute("insert into cf_hard.cap (id, other, region) values (20, 2, 0)")
    message = str(info.value)
    assert "cf_hard.cap" in message and "changed since setup" in message
    assert "setup_feed" in (info.value.diag.message_hint or "")
    assert admin.execute("select count(*) from cf_hard.cap").fetchone() == (1,)
    # setup with the same config re-creates the capture for the columns as they are now.
    logged = setup_feed(dbt, "cf_hard", "cap", "outbox", **CAP)
    assert any("re-created the capture function" in m for m in logged), logged
    admin.execute("insert into cf_hard.cap (id, other, region) values (20, 2, 0)")
    assert _keys(admin, captured, 0) == [(1,), (20,)]

    # A column the shard expression reads, retyped: refused as well.
    admin.execute("alter table cf_hard.cap alter column region type numeric")
    with _sqlstate("CF010"):
        admin.execute("insert into cf_hard.cap (id, other, region) values (30, 3, 1.5)")
    # A column the capture does not read may change freely.
    admin.execute("alter table cf_hard.cap alter column region type int")
    setup_feed(dbt, "cf_hard", "cap", "outbox", **CAP)
    admin.execute("alter table cf_hard.cap alter column other type numeric")
    admin.execute("insert into cf_hard.cap (id, other, region) values (30, 3.5, 0)")
    assert _keys(admin, captured, 0) == [(1,), (20,), (30,)]


def test_a_retyped_key_stops_writes_and_setup_names_the_remedy(
    captured: PostgresFeed, dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    admin.execute("alter table cf_hard.cap alter column id type numeric")
    with _sqlstate("CF010"):
        admin.execute("insert into cf_hard.cap values (1.5, 1, 0)")
    assert admin.execute("select count(*) from cf_hard.cap").fetchone() == (0,)


def test_a_recreated_source_table_is_captured_before_its_first_write(
    captured: PostgresFeed, dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    """Issue 31's bar: a capture: trigger source dropped and created again, then written
    without setup, commits no write without its event (the event trigger, protocol 5.1);
    a table that arrives with rows (CREATE TABLE AS, renamed into place) is refused."""
    columns = "id bigint primary key, other bigint, region int"
    admin.execute("insert into cf_hard.cap values (1, 10, 0)")
    with admin.transaction():  # in one transaction with the writes, as a deploy would
        create_table(admin, "cf_hard", "cap", columns)
        admin.execute("insert into cf_hard.cap values (2, 20, 0)")
    admin.execute("insert into cf_hard.cap values (3, 30, 0)")
    assert _keys(admin, captured, 0) == [(1,), (2,), (3,)]

    admin.execute("create table cf_hard.cap_next as select * from cf_hard.cap")
    admin.execute("drop table cf_hard.cap")
    with _sqlstate("CF011") as refused:
        admin.execute("alter table cf_hard.cap_next rename to cap")
    assert "rows that no event records" in str(refused.value)
    assert admin.execute("select to_regclass('cf_hard.cap')").fetchone() == (None,)
    with _sqlstate("CF011"):
        admin.execute("create table cf_hard.cap as select * from cf_hard.cap_next")
    admin.execute("drop table cf_hard.cap_next")
    # Created empty, then filled: every row an event.
    create_table(admin, "cf_hard", "cap", columns)
    admin.execute("insert into cf_hard.cap values (4, 40, 0), (5, 50, 0)")
    assert _keys(admin, captured, 0) == [(1,), (2,), (3,), (4,), (5,)]


def test_a_recreated_source_table_is_reported_by_the_mover_until_setup_runs(
    captured: PostgresFeed, dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    """Without the event trigger (a feed set up by a role that is not a superuser, which
    event triggers need), reads report the lost triggers until setup runs."""
    names = registry_row(admin, "cf_hard.cap")["names"]  # type: ignore[index]
    admin.execute(f'drop event trigger "{names["recapture_trigger"]}"')
    admin.execute("insert into cf_hard.cap values (1, 10, 0)")
    create_table(admin, "cf_hard", "cap", "id bigint primary key, other bigint, region int")
    admin.execute("insert into cf_hard.cap values (2, 20, 0)")  # not captured: no triggers
    with pytest.raises(CaptureLost) as info:
        captured.move_outbox(admin, 0)
    assert "lost its capture triggers" in str(info.value)
    logged = setup_feed(dbt, "cf_hard", "cap", "outbox", **CAP)
    assert any("re-created the capture function and triggers" in m for m in logged), logged
    admin.execute("insert into cf_hard.cap values (3, 30, 0)")
    assert _keys(admin, captured, 0) == [(1,), (3,)]
    # A disabled trigger counts as lost, and setup enables it again.
    admin.execute("alter table cf_hard.cap disable trigger user")
    with pytest.raises(CaptureLost):
        captured.move_outbox(admin, 0)
    setup_feed(dbt, "cf_hard", "cap", "outbox", **CAP)
    admin.execute("insert into cf_hard.cap values (4, 40, 0)")
    assert _keys(admin, captured, 0) == [(1,), (3,), (4,)]


# -- inputs ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(dbt: Any, admin: psycopg.Connection[Any]) -> dict[str, dict[str, str]]:
    """cf_hard.in_b (blocking) and cf_hard.in_o (outbox): their registered names."""
    names = {}
    for table, mode in (("in_b", "blocking"), ("in_o", "outbox")):
        create_table(admin, "cf_hard", table, "id bigint primary key")
        teardown_feed(dbt, "cf_hard", table)
        setup_feed(dbt, "cf_hard", table, mode)
        row = registry_row(admin, f"cf_hard.{table}")
        assert row is not None
        names[mode] = dict(row["names"])
    return names


def _q(name: str) -> str:
    return 'changefeed."' + name.replace('"', '""') + '"'


def test_public_routines_refuse_null_and_malformed_arguments(
    inputs: dict[str, dict[str, str]], admin: psycopg.Connection[Any]
) -> None:
    for mode, names in inputs.items():
        calls = [
            f"select * from {_q(names['safe_point'])}(null)",
            f"select * from {_q(names['barrier_acquire'])}(null)",
            f"select {_q(names['barrier_check'])}(null, '\\x{'00' * 16}', 0)",
            f"select {_q(names['barrier_check'])}(0, null, 0)",
            f"select {_q(names['barrier_check'])}(0, '\\x{'00' * 15}', 0)",
            f"select {_q(names['barrier_check'])}(0, '\\x{'00' * 17}', 0)",
            f"select {_q(names['tombstone'])}(null, 1, 1)",
            f"select {_q(names['tombstone'])}(0, null, 1)",
            f"select {_q(names['tombstone'])}(0, 1, null)",
            f"select * from {_q(names['read_feed'])}(0, '\\x{'00' * 15}', 10)",
        ]
        if mode == "outbox":
            calls.append(f"select {_q(names['barrier_check'])}(0, '\\x{'00' * 16}', null)")
        for call in calls:
            with _sqlstate("CF007") as info:
                admin.execute(call)
            assert "changefeed:" in str(info.value), call
    # The feed table holds 16-byte ULIDs only.
    for bad in (15, 17):
        with _sqlstate("23514"):
            admin.execute(
                f"insert into {_q(inputs['blocking']['feed'])} (shard_id, ulid, id) "
                f"values (0, '\\x{'01' * bad}', 1)"
            )


def test_setup_adds_the_ulid_check_to_a_feed_that_lacks_it(
    inputs: dict[str, dict[str, str]], dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    names = inputs["outbox"]
    constraint = '"' + names["feed_ulid"].replace('"', '""') + '"'
    admin.execute(f"alter table {_q(names['feed'])} drop constraint {constraint}")
    logged = setup_feed(dbt, "cf_hard", "in_o", "outbox")
    assert any("added the check that every ULID of the feed table is 16 bytes" in m for m in logged)
    found = admin.execute(
        "select count(*) from pg_constraint where conname = %s", (names["feed_ulid"],)
    ).fetchone()
    assert found == (1,)
    assert setup_feed(dbt, "cf_hard", "in_o", "outbox") == [
        "changefeed: feed cf_hard.in_o is already set up (outbox); nothing to do"
    ]


def test_the_client_refuses_malformed_arguments_before_any_round_trip() -> None:
    feed = PostgresFeed("cf_hard.in_b")
    conn: Any = None  # never reached: the checks come first
    refused: list[Callable[[], object]] = [
        lambda: feed.safe_point(conn, None),  # type: ignore[arg-type]
        lambda: feed.safe_point(conn, True),
        lambda: feed.safe_point(conn, 2**31),
        lambda: feed.barrier_acquire(conn, "0"),  # type: ignore[arg-type]
        lambda: feed.barrier_check(conn, Barrier(0, bytes(15), None)),
        lambda: feed.barrier_check(conn, Barrier(0, bytes(17), None)),
        lambda: feed.barrier_check(conn, Barrier(None, bytes(16), None)),  # type: ignore[arg-type]
        lambda: feed.barrier_check(conn, (0, bytes(16))),  # type: ignore[arg-type]
        lambda: feed.tombstone(conn, 0, None, 1),  # type: ignore[arg-type]
        lambda: feed.tombstone(conn, 0, 1, 1.5),  # type: ignore[arg-type]
        lambda: feed.read_page(conn, 0, bytes(15)),
        lambda: feed.read_page(conn, 0, None),  # type: ignore[arg-type]
        lambda: feed.read_page(conn, 0, bytes(16), page_size=0),
        lambda: feed.move_outbox(conn, 0, max_rows=None),  # type: ignore[arg-type]
        lambda: feed.insert_outbox(conn, None, [(1,)]),  # type: ignore[arg-type]
        lambda: feed.insert_outbox(conn, 0, [(1,)], time_hint="2030-01-01"),  # type: ignore[arg-type]
    ]
    for call in refused:
        with pytest.raises(InvalidArgument):
            call()
    with pytest.raises(InvalidArgument), feed.write(conn, None):  # type: ignore[arg-type]
        pass


# -- bounded bookkeeping -------------------------------------------------------------------


@pytest.mark.slow  # 12-20 s alone: left to make test, out of the edit loop
def test_connection_churn_leaves_the_session_table_bounded(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """1,000 short-lived connections, one write each, in 4 threads: the session table keeps
    about one row per live writer (not one per backend ever seen: without cleaning it would
    hold 1,000), and the safe point and the events are unaffected."""
    feed, session = _blocking_feed(dbt, admin, "churn")
    ids = iter(range(1000))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def churn() -> None:
        while True:
            with lock:
                i = next(ids, None)
            if i is None:
                return
            try:
                with connect(pg_uri) as conn, feed.write(conn, 0) as w:
                    w.insert_events([(i,)])
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert errors == []
    rows = admin.execute(f"select count(*) from {session}").fetchone()
    # Fewer than 8 rows of gone connections, 4 live writers, and at most 4 more whose server
    # process had not exited yet when the last cleaning ran.
    assert rows is not None and rows[0] <= 16, rows
    point = feed.safe_point(admin, 0)
    assert point.pending == 0 and point.safe_point == point.head
    assert sorted(_read_keys(feed, admin, 0)) == list(range(1000))


def test_every_shard_keeps_its_session_table_bounded_after_abandoned_writes(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """240 short-lived connections in turn over 4 shards, every other one dying with its
    write pending (abandoned, reaped by the next lock call): each shard keeps at most 10
    rows. Cleaning is decided per shard, so a shard whose write ids never fall on some
    multiple (the feed's one sequence is shared by its shards) is cleaned all the same."""
    feed, session = _blocking_feed(dbt, admin, "abandon")
    committed = []
    for i in range(240):
        conn = connect(pg_uri)
        if i % 2:
            write = feed.write(conn, i % 4)
            write.__enter__().insert_events([(i,)])
            conn.close()  # gone with its write pending: never committed, never released
        else:
            with conn, feed.write(conn, i % 4) as w:
                w.insert_events([(i,)])
            committed.append(i)
    counts = dict(admin.execute(f"select shard_id, count(*) from {session} group by 1").fetchall())
    assert set(counts) == {0, 1, 2, 3} and max(counts.values()) <= 10, counts
    pending = admin.execute(f"select count(*) from {session} where state = 0").fetchone()
    assert pending is not None and pending[0] <= 4, pending  # at most each shard's last write
    keys = [key for shard in range(4) for key in _read_keys(feed, admin, shard)]
    assert sorted(keys) == committed


def _blocking_feed(dbt: Any, admin: psycopg.Connection[Any], table: str) -> tuple[Any, str]:
    """A new blocking feed on cf_hard.<table> (id bigint) and its session table, quoted."""
    create_table(admin, "cf_hard", table, "id bigint primary key")
    teardown_feed(dbt, "cf_hard", table)
    setup_feed(dbt, "cf_hard", table, "blocking")
    row = registry_row(admin, f"cf_hard.{table}")
    assert row is not None
    return PostgresFeed(f"cf_hard.{table}"), _q(row["names"]["session"])


def _read_keys(feed: Any, conn: psycopg.Connection[Any], shard: int) -> list[Any]:
    """The first key column of every event of ``shard``, read page by page."""
    keys: list[Any] = []
    cursor = bytes(16)
    while page := feed.read_page(conn, shard, cursor, page_size=1000).events:
        keys.extend(e.key[0] for e in page)
        cursor = page[-1].ulid
    return keys


def test_incidents_keep_the_newest_thousand_per_shard(
    inputs: dict[str, dict[str, str]], admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    names = inputs["blocking"]
    incident = _q(names["incident"])
    admin.execute(
        f"insert into {incident} (shard_id, generation, detected_at, reason) "
        "select 7, 0, now() - make_interval(secs => g), 'tombstone' from generate_series(1, 1100) g"
    )
    admin.execute(
        f"insert into {incident} (shard_id, generation, detected_at, reason) "
        "select 8, 0, now(), 'tombstone' from generate_series(1, 5)"
    )
    feed = PostgresFeed("cf_hard.in_b")
    with connect(pg_uri) as conn, pytest.raises(WriteAbandoned), feed.write(conn, 7) as w:
        assert feed.tombstone(admin, 7, conn.info.backend_pid, w.write_id)
    counts = dict(admin.execute(f"select shard_id, count(*) from {incident} group by 1").fetchall())
    assert counts == {7: 1000, 8: 5}
    newest = admin.execute(
        f"select holder_write_id from {incident} where shard_id = 7 "
        "order by detected_at desc limit 1"
    ).fetchone()
    assert newest == (w.write_id,)


# -- trusted writers --------------------------------------------------------------------------


def test_a_blocking_writer_cannot_insert_outside_its_shard_and_block(
    inputs: dict[str, dict[str, str]], admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    names = inputs["blocking"]
    table = _q(names["feed"])
    feed = PostgresFeed("cf_hard.in_b")
    below = bytes(15) + b"\x01"  # below every consumer's cursor: never read
    with connect(pg_uri) as conn:
        feed.info(conn)
        with as_role(conn, names["writer_role"]):
            with pytest.raises(NoWriteInProgress):
                try:
                    conn.execute(
                        f"insert into {table} (shard_id, ulid, id) values (0, %s, 1)", (below,)
                    )
                except psycopg.Error as exc:
                    raise translate(exc) from exc
            conn.rollback()
            insert = f"insert into {table} (shard_id, ulid, id) values (%s, {{}}, 2)"
            with pytest.raises(WriteOutsideBlock), feed.write(conn, 0):
                conn.execute(insert.format("%s"), (0, below))
            with pytest.raises(WriteOutsideBlock), feed.write(conn, 0) as w:
                conn.execute(insert.format(w.ulid_sql), (1,))  # its block, another shard
            # A row after the block (another write's) is refused as well; inside it is fine.
            with pytest.raises(WriteOutsideBlock), feed.write(conn, 0) as w:
                after = w.ulid_high + (w.block_start + 2**36).to_bytes(8, "big", signed=True)
                conn.execute(
                    f"insert into {table} (shard_id, ulid, id) values (0, %s, 3)", (after,)
                )
            with feed.write(conn, 0) as w:
                w.insert_events([(4,)])
    assert [e.key for e in feed.read_page(admin, 0).events] == [(4,)]


def test_setup_adds_the_guard_to_a_blocking_feed_that_lacks_it(
    inputs: dict[str, dict[str, str]], dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    names = inputs["blocking"]
    trigger = '"' + names["guard"].replace('"', '""') + '"'
    admin.execute(f"drop trigger {trigger} on {_q(names['feed'])}")
    logged = setup_feed(dbt, "cf_hard", "in_b", "blocking")
    assert any("added the guard trigger" in m for m in logged), logged
    found = admin.execute(
        "select count(*) from pg_trigger where tgname = %s", (names["guard"],)
    ).fetchone()
    assert found == (1,)


def test_a_writer_lock_just_released_by_a_closed_session_is_taken(pg_uri: str) -> None:
    """A landing started right after another one closed its connection (a loop, a re-run)
    takes the table's writer lock: the closed session keeps its locks until its server
    process has exited, which the lock waits out instead of refusing. A live holder is
    still named at once."""
    from changefeed.dialects.postgres.client import try_writer_lock

    with psycopg.connect(pg_uri, autocommit=True) as taker:
        for attempt in range(30):
            holder = psycopg.connect(pg_uri, autocommit=True)
            assert try_writer_lock(holder, f"hardening.lock_{attempt}") is None
            holder.close()  # returns before the server has released the lock
            assert try_writer_lock(taker, f"hardening.lock_{attempt}") is None, attempt
        with psycopg.connect(pg_uri, autocommit=True, application_name="other-landing") as live:
            assert try_writer_lock(live, "hardening.live") is None
            held = try_writer_lock(taker, "hardening.live")
            assert held is not None and "other-landing" in held, held
