"""The defects of the T-SQL review (issue "SQL Server", /docs/sqlserver.md) that only a
server shows, each as the scenario that would have failed before its fix: pages of
blocks with any ulid_low (#1), the schema owner (#3), IMPLICIT_TRANSACTIONS clients (#4),
an mssql-changefeed style #read loop (#6), lock escalation (#11) and the session options
that created objects keep (#13)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.sqlserver_live import (
    BLOCK,
    LiveFeed,
    expect_error,
    lit,
    run,
    scalar,
)


def _pages(feed: LiveFeed, conn: Any, page_size: int) -> list[list[Any]]:
    pages, cursor = [], bytes(16)
    while (page := feed.client.read_page(conn, 0, cursor, page_size=page_size)).events:
        pages.append([r.key[0] for r in page.events])
        cursor = page.cursor
    return pages


@pytest.mark.parametrize("seed_low", [-(2**62), -2 * BLOCK, 2**40, 2**62 - 4 * BLOCK])
def test_a_full_page_ends_at_a_transaction_boundary_whatever_the_low(
    fresh: Any, conn: Any, seed_low: int
) -> None:
    """#1: read_feed computed the last ULID of a block as `@low + 68719476735`, a decimal,
    whose binary(8) is not the bigint's: for negative lows (and most positive ones) a full
    page ended inside a transaction."""
    feed: LiveFeed = fresh("blocking_int")
    # the shard's state, 10 minutes ahead so that the next writes continue its block
    run(
        conn,
        "declare @t datetime2(3) = dateadd(minute, 10, sysutcdatetime());\n"
        f"insert into {feed.obj('state')} (shard_id, time, ulid_high, ulid_low, generation)\n"
        "values (0, @t, convert(binary(6), datediff_big(millisecond, '1970-01-01', @t))"
        f" + 0x0000, {seed_low}, 0);",
    )
    feed.write(conn, 0, [[1], [2], [3]])
    feed.write(conn, 0, [[4], [5]])
    assert _pages(feed, conn, page_size=2) == [[1, 2, 3], [4, 5]]


@pytest.mark.parametrize("case", ["blocking_int", "outbox_int"])
def test_read_feed_into_read_holds_one_page(fresh: Any, conn: Any, case: str) -> None:
    """#6: mssql-changefeed's read_feed emptied #read first; a loop that reads #read after
    each call must not see earlier pages again."""
    feed: LiveFeed = fresh(case)
    for order_id in (1, 2, 3):
        if feed.spec["mode"] == "blocking":
            feed.write(conn, 0, [[order_id]])
        else:
            feed.outbox_insert(conn, 0, [[order_id]])
    seen = run(
        conn,
        "create table #read (ulid binary(16) not null, order_id int not null);\n"
        "declare @cursor binary(16) = 0x00000000000000000000000000000000;\n"
        "declare @seen table (call int not null, order_id int not null);\n"
        "declare @call int = 1;\n"
        "while @call <= 3\n"
        "begin\n"
        f"    exec {feed.obj('read_feed')} 0, @cursor, @pagesize = 1;\n"
        "    insert into @seen select @call, order_id from #read;\n"
        "    select @cursor = max(ulid) from #read;\n"
        "    set @call += 1;\n"
        "end;\n"
        "drop table #read;\n"
        "select call, order_id from @seen order by call, order_id;",
    )
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_procedures_that_commit_refuse_implicit_transactions(fresh: Any, conn: Any) -> None:
    """#4: under SET IMPLICIT_TRANSACTIONS ON (pyodbc's autocommit=False) EXEC opens no
    transaction, so `@@trancount > 0` passed and the lock call's commit only nested in the
    transaction its first read opened."""
    blocking: LiveFeed = fresh("blocking_int")
    outbox: LiveFeed = fresh("outbox_composite")  # another table: one feed per table
    calls = [
        (f"exec {blocking.obj('lock')} @shard_id = 0;", 51001),
        (f"exec {blocking.obj('release')};", 51015),
        (
            f"exec {blocking.obj('tombstone')} @shard_id = 0, @session_id = 1, "
            "@write_id = '00000000-0000-0000-0000-000000000000';",
            51040,
        ),
        (f"exec {outbox.obj('read_feed')} @shard_id = 0;", 51020),
    ]
    try:
        for call, number in calls:
            expect_error(
                conn,
                "set implicit_transactions on;\n" + call,
                number=number,
                text="cannot run with SET IMPLICIT_TRANSACTIONS ON",
            )
            run(conn, "if @@trancount > 0 rollback;")
            assert scalar(conn, "select @@trancount;") == 0
    finally:
        run(conn, "set implicit_transactions off;")
    blocking.write(conn, 0, [[1]])  # the same connection works again in autocommit
    assert [r.key[0] for r in blocking.read_all(conn, 0)] == [1]


def test_the_changefeed_schema_is_owned_by_dbo(fresh: Any, conn: Any) -> None:
    """#3: a schema created by a db_owner member who is not dbo was owned by that user,
    which breaks the capture trigger's ownership chain to the outbox."""
    feed: LiveFeed = fresh("outbox_trigger")
    owner = scalar(
        conn,
        f"select user_name(principal_id) from sys.schemas where name = {lit(feed.spec['schema'])};",
    )
    assert owner == "dbo"


@pytest.mark.parametrize("case", ["blocking_int", "outbox_trigger"])
def test_hot_tables_do_not_escalate_locks(fresh: Any, conn: Any, case: str) -> None:
    """#11: ~5000 row locks in one statement would lock the whole feed or outbox table."""
    feed: LiveFeed = fresh(case)
    kinds = ["state", "feed", "session"] + (["outbox"] if feed.spec["mode"] == "outbox" else [])
    for kind in kinds:
        escalation = scalar(
            conn,
            "select lock_escalation_desc from sys.tables "
            f"where object_id = object_id({lit(feed.obj(kind))});",
        )
        assert escalation == "DISABLE", kind


def test_created_objects_keep_the_ansi_options_whatever_the_client(fresh: Any, conn: Any) -> None:
    """#13: procedures and triggers keep the QUOTED_IDENTIFIER and ANSI_NULLS of the session
    that creates them, columns its ANSI_PADDING. The setup batch turns them on itself, so a
    client that has them off (DB-Library, sqlcmd without -I) creates what ODBC clients
    create, and the hostile shard expression's "end" stays a column, not a string."""
    feed: LiveFeed = fresh("outbox_trigger_hostile")
    run(conn, "set quoted_identifier off;\nset ansi_nulls off;\nset ansi_padding off;")
    assert feed.teardown(conn) == "dropped"
    assert feed.setup(conn) == "created"
    schemas = (
        f"(schema_id({lit(feed.spec['schema'])}), schema_id({lit(feed.spec['source_schema'])}))"
    )
    modules = run(
        conn,
        "select o.name, m.uses_quoted_identifier, m.uses_ansi_nulls\n"
        "from sys.sql_modules as m inner join sys.objects as o on o.object_id = m.object_id\n"
        f"where o.schema_id in {schemas};",
    )
    assert len(modules) >= 8 and all(q_id and nulls for _, q_id, nulls in modules), modules
    columns = run(
        conn,
        "select t.name, c.name from sys.columns as c\n"
        "inner join sys.tables as t on t.object_id = c.object_id\n"
        "inner join sys.types as y on y.user_type_id = c.user_type_id\n"
        f"where t.schema_id = schema_id({lit(feed.spec['schema'])}) and c.is_ansi_padded = 0\n"
        "and y.name in (N'varchar', N'nvarchar', N'varbinary', N'char', N'nchar', N'binary');",
    )
    assert columns == []


def test_two_tables_with_one_feed_id_do_not_share_a_feed(conn: Any) -> None:
    """#14: [my.schema].[t] and [my].[schema.t] both have the feed id my.schema.t; the
    second's setup found the first's row and said `unchanged`, its teardown dropped it."""
    first, second = LiveFeed("blocking_dotted_schema"), LiveFeed("blocking_dotted_table")
    for feed in (first, second):
        feed.create_source(conn)
    first.teardown(conn)
    assert first.setup(conn) == "created"
    for section in ("setup", "upgrade", "teardown"):
        message = expect_error(conn, second.batches[section], number=51060)
        assert "belongs to the table [my.schema].[t], not to [my].[schema.t]" in message
    first.write(conn, 0, [[1]])  # untouched
    assert [r.key[0] for r in first.read_all(conn, 0)] == [1]
    assert first.teardown(conn) == "dropped"
    assert second.setup(conn) == "created"
    assert second.teardown(conn) == "dropped"
