"""Setting a feed up again, at once from several sessions, and with hostile names.

* D1 under load: ``setup_feed`` with an unchanged config is a no-op while writers and
  readers keep going; no write or read fails and the history checks;
* a changed option replaces the routines while a call waits inside the old ones: the
  call must finish and its connection stay usable;
* D2: the setup statement run from several threads at once gives one feed (no error), and
  a race between two modes gives one feed and a clear CF008 for the loser;
* hostile and over-long names (quotes, semicolons, spaces, non-ASCII, > 63 bytes) for the
  schema, the table and a composite key, end to end with concurrent writers and readers.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.faults.checker import History, check
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed
from tests.support.faults.load import ThreadWrite, run_load, write_once
from tests.support.faults.procs import wait_until
from tests.support.pg_feeds import race

pytestmark = pytest.mark.postgres


def _setup(faults_dbt: Any, kit: FeedKit, stall_timeout_ms: int) -> list[str]:
    logged: list[str] = faults_dbt.run_operation(
        "changefeed.setup_feed",
        {"relation": {"schema": kit.source_schema, "table": kit.source_table},
         "mode": kit.mode, "stall_timeout_ms": stall_timeout_ms, "lock_probe_ms": 20},
        target="postgres",
    )  # fmt: skip
    return logged


def _routine_oids(admin: psycopg.Connection[Any], kit: FeedKit) -> dict[str, int]:
    rows = admin.execute(
        "select p.proname, p.oid::int from pg_proc p join pg_namespace n "
        "on n.oid = p.pronamespace where n.nspname = %s and p.proname = any(%s)",
        [kit.schema, list(kit.names.values())],
    ).fetchall()
    return dict(rows)


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_setup_again_under_load(
    make_feed: MakeFeed,
    connect: Connections,
    admin: psycopg.Connection[Any],
    faults_dbt: Any,
    mode: str,
) -> None:
    """D1: setup with an unchanged config while writers and readers run is a no-op."""
    kit = make_feed(mode, stall_timeout_ms=2000)
    stop = threading.Event()
    results: list[Any] = []
    load = threading.Thread(
        target=lambda: results.append(
            run_load(kit, connect, shards=[0, 1], writers=2, writes_per_writer=0, readers=2,
                     until=stop, seed=5)
        )
    )  # fmt: skip
    load.start()
    try:
        before = _routine_oids(admin, kit)
        for _ in range(3):
            assert any("nothing to do" in m for m in _setup(faults_dbt, kit, 2000))
        assert _routine_oids(admin, kit) == before  # nothing was re-created
    finally:
        stop.set()
        load.join(120)
    [result] = results
    assert not result.errors, result.errors
    summary = check(result.history, kit.final(admin))
    refused = Counter(w.detail[:300] for w in result.history.writes.values() if w.outcome != "ok")
    assert summary.writes_ok == len(result.history.writes) > 0, refused.most_common(3)
    assert kit.incidents(admin) == []


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
def test_option_change_while_a_call_waits(
    make_feed: MakeFeed,
    connect: Connections,
    admin: psycopg.Connection[Any],
    faults_dbt: Any,
    mode: str,
) -> None:
    """Setup with a changed option while a writer waits in ``lock`` (blocking) or a reader
    waits in ``move_outbox`` for the mover lock (outbox). The waiting call must finish
    normally, and the connection must be usable afterwards."""
    kit = make_feed(mode, stall_timeout_ms=5000)
    history = History()
    conn = connect()
    if mode == "blocking":
        holder = ThreadWrite(kit, connect(), history, 0, [1], hold="inserted")
        holder.wait_for("inserted")
        waiter = ThreadWrite(kit, conn, history, 0, [2])
    else:
        assert write_once(kit, connect(), history, 0, [1])
        mover = connect()
        mover.execute("begin")
        kit.move_outbox(mover, 0)  # holds the mover lock until commit
        moved: list[Any] = []

        def move() -> None:
            try:
                moved.append(kit.move_outbox(conn, 0))
            except psycopg.Error as exc:
                moved.append(exc)

        waiting = threading.Thread(target=move)
        waiting.start()
    wait_until(
        lambda: (
            admin.execute(
                "select 1 from pg_locks where pid = %s and not granted", [conn.info.backend_pid]
            ).fetchone()
            is not None
        ),
        10,
        0.001,
        "the call to wait for its lock",
    )
    assert any("updated" in m for m in _setup(faults_dbt, kit, 5001))
    if mode == "blocking":
        holder.release()
        assert holder.join()
        assert waiter.join(), waiter.record  # the waiting write commits
        assert write_once(kit, conn, history, 0, [3])  # and its connection writes again
        assert kit.incidents(admin) == []
    else:
        mover.execute("commit")
        waiting.join(30)
        assert moved == [0]
        assert write_once(kit, connect(), history, 0, [2])
        assert kit.move_outbox(conn, 0) == 1
    held = admin.execute(
        "select count(*) from pg_locks where pid = %s and locktype = 'advisory'",
        [conn.info.backend_pid],
    ).fetchone()
    assert held == (0,)
    check(history, kit.final(admin))


def _setup_sql(faults_dbt: Any, schema: str, table: str, modes: list[str]) -> list[str]:
    """The setup statement dbt would run (rendered, not run), per mode."""
    snippet = (
        "{%- if execute -%}"
        "{%- set s = changefeed._feed_build_spec({'schema': '" + schema + "', 'table': '"
        + table + "'}, {'mode': 'MODE', 'stall_timeout_ms': 600},"
        " changefeed._postgres_key_columns) -%}"
        "{{ changefeed._postgres_sql_setup(s, changefeed._postgres_feed_context(s),"
        " changefeed._postgres_key_signature(s['keys']), changefeed._postgres_feed_options(s)) }}"
        "{%- endif -%}"
    )  # fmt: skip
    rendered: list[str] = faults_dbt.render_many(
        [snippet.replace("MODE", m) for m in modes], "postgres"
    )
    return rendered


def test_concurrent_setups(
    connect: Connections, admin: psycopg.Connection[Any], faults_dbt: Any
) -> None:
    from tests.support.faults.checker import History
    from tests.support.faults.load import write_once

    for schema in ("pgf_race_same", "pgf_race_modes"):
        admin.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("create schema {}").format(sql.Identifier(schema)))
        admin.execute(
            sql.SQL("create table {}.t (id bigint primary key)").format(sql.Identifier(schema))
        )
    # Four sessions run the same setup at once: one feed, no error (D2).
    [blocking_sql] = _setup_sql(faults_dbt, "pgf_race_same", "t", ["blocking"])
    assert race(connect, [blocking_sql] * 4) == [None] * 4
    kit = FeedKit.load(admin, "pgf_race_same.t")
    count = admin.execute(
        "select count(*) from changefeed.feeds where feed_id = 'pgf_race_same.t'"
    ).fetchone()
    assert count == (1,)
    history = History()
    assert write_once(kit, connect(), history, 0, [1, 2])
    check(history, kit.final(admin))
    # Two modes race: exactly one wins, the other fails clearly; no half-made feed.
    statements = _setup_sql(faults_dbt, "pgf_race_modes", "t", ["blocking", "outbox"] * 2)
    results = race(connect, statements)
    failures = [r for r in results if r is not None]
    winner = FeedKit.load(admin, "pgf_race_modes.t")
    assert len(failures) == 2, results
    for failure in failures:
        assert getattr(failure, "sqlstate", None) == "CF008", failure
        assert "is registered with mode " + winner.mode in str(failure)
        assert "teardown_feed" in str(failure)  # names the remedy
    tables = {
        r[0]
        for r in admin.execute(
            "select relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where n.nspname = 'changefeed' and relname like %s",
            ["%pgf_race_modes.t"],
        )
    }
    assert ("outbox:pgf_race_modes.t" in tables) == (winner.mode == "outbox")
    history = History()
    assert write_once(winner, connect(), history, 0, [1])
    check(history, winner.final(admin))


HOSTILE = [
    pytest.param('pgf "sch;ema', 'Or"ders; drop table x;--', id="quotes-semicolons"),
    pytest.param(
        "pgf_схема_" + "длинная_" * 3,
        "заказы_" + "очень_длинное_имя_таблицы_" * 2 + '"',
        id="non-ascii-over-63-bytes",
    ),
]


@pytest.mark.parametrize("mode", ["blocking", "outbox"])
@pytest.mark.parametrize(("schema", "table"), HOSTILE)
def test_hostile_names_under_load(
    make_feed: MakeFeed,
    connect: Connections,
    admin: psycopg.Connection[Any],
    schema: str,
    table: str,
    mode: str,
) -> None:
    kit = make_feed(
        mode,
        schema=schema + "_" + mode,
        table=table,
        columns='"we""ird key" text, "ключ; 2" int, primary key ("ключ; 2", "we""ird key")',
        stall_timeout_ms=2000,
    )
    assert kit.key_columns == ['we"ird key', "ключ; 2"] or kit.key_columns == [
        "ключ; 2",
        'we"ird key',
    ]
    for kind, name in kit.names.items():
        assert len(name.encode()) <= 63, (kind, name)

    def key(n: int) -> tuple[Any, ...]:
        values = {'we"ird key': f"k'{n};\"$$", "ключ; 2": n % 7}
        return tuple(values[c] for c in kit.key_columns)

    result = run_load(
        kit, connect, shards=[0, 3], writers=2, writes_per_writer=15, readers=2, key=key
    )
    assert not result.errors, result.errors
    final = kit.final(admin)
    summary = check(result.history, final)
    assert summary.writes_ok == 30
    for reader in result.readers:
        assert reader.seen == final
    source = admin.execute(
        sql.SQL("select count(*) from {}").format(sql.Identifier(kit.source_schema, table))
    ).fetchone()
    assert source == (summary.events,)
