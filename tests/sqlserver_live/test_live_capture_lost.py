"""Protocol 5.1 and O6 on a real SQL Server: a ``capture: trigger`` source dropped and
re-created is captured before its first write by the feed's DDL trigger ``recapture``, and
one renamed into place with rows is refused (51074). Without that DDL trigger (a setup
without ALTER ANY DATABASE DDL TRIGGER), a source that lost its trigger, has it disabled,
or was dropped and re-created fails the readers at the head with 51068 (``CaptureLost``,
PostgreSQL's CF011) until setup repairs it, for the reader role too, which may not see
the source's metadata (``capture_check`` runs as its owner). The feed is the render
matrix's ``outbox_trigger`` case, set up from its rendered batch."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.sqlserver_live import LiveFeed, Server, lit, member_of, q, run, scalar

from changefeed.client import CaptureLost
from changefeed.dialects.sqlserver import client as mssql_client

TENANT = "6f9619ff-8b86-d011-b42d-00c04fc964ff"


def source(feed: LiveFeed) -> str:
    return f"{q(feed.spec['source_schema'])}.{q(feed.spec['source_table'])}"


def trigger(feed: LiveFeed) -> str:
    schema = feed.spec["schema"] + "." + feed.spec["feed_id"]
    return f"{q(feed.spec['source_schema'])}.{q('capture:' + schema)}"


def insert(conn: Any, feed: LiveFeed, sku: str) -> None:
    run(conn, f"insert into {source(feed)} (tenant_id, sku, version) "
              f"values ({lit(TENANT)}, {lit(sku)}, 1);")  # fmt: skip


def skus(conn: Any, feed: LiveFeed) -> list[str]:
    """Every event of every shard the case's shard expression can give, by sku."""
    return sorted(str(e.key[1]) for shard in range(4) for e in feed.read_all(conn, shard))


def recapture(feed: LiveFeed) -> str:
    return "recapture:" + feed.spec["schema"] + "." + feed.spec["feed_id"]


def drop_recapture(conn: Any, feed: LiveFeed) -> None:
    """What a setup without ALTER ANY DATABASE DDL TRIGGER leaves: no DDL trigger."""
    run(conn, f"drop trigger {q(recapture(feed))} on database;")


def recapture_enabled(conn: Any, feed: LiveFeed) -> bool:
    name = lit(recapture(feed))
    return bool(scalar(conn, "select count(*) from sys.triggers where parent_class = 0 "
                             f"and is_disabled = 0 and name = {name};"))  # fmt: skip


def reader(mssql: Server, conn: Any, feed: LiveFeed) -> Any:
    """A connection acting as a member of the feed's reader role only."""
    return member_of(mssql, conn, feed.role("reader"), "cf_capture_reader")


def expect_capture_lost(conn: Any, feed: LiveFeed, cause: str) -> None:
    with pytest.raises(CaptureLost) as caught:
        feed.client.read_page(conn, 0)
    message = str(caught.value)
    assert "51068" in message and cause in message
    assert feed.spec["feed_id"] in message and "changefeed.setup_feed" in message
    assert "re-emit the changes" in message


def test_a_re_created_source_is_captured_before_its_first_write(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    assert recapture_enabled(conn, feed)
    insert(conn, feed, "before")
    feed.create_source(conn)  # dropped and re-created, without setup
    insert(conn, feed, "after")
    assert skus(conn, feed) == ["after", "before"]  # read_feed's capture_check passes too
    assert feed.setup(conn) == "unchanged"


def test_a_table_renamed_into_place_with_rows_is_refused(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    schema = q(feed.spec["source_schema"])
    insert(conn, feed, "kept")
    run(conn, f"select * into {schema}.[cf_rows] from {source(feed)};")
    run(conn, f"drop table {source(feed)};")
    with pytest.raises(Exception) as refused:
        run(conn, f"exec sp_rename {lit(feed.spec['source_schema'] + '.cf_rows')}, "
                  f"{lit(feed.spec['source_table'])};")  # fmt: skip
    assert mssql_client.error_number(refused.value) == 51074
    assert "would hold rows that no event records" in str(refused.value)
    # rolled back: the table keeps its name, and the source is still gone
    assert scalar(conn, f"select object_id({lit(feed.spec['source_schema'] + '.cf_rows')});")
    assert scalar(conn, f"select object_id({lit(source(feed))});") is None
    run(conn, f"drop table {schema}.[cf_rows];")


def test_a_re_created_source_fails_readers_until_setup_repairs(
    mssql: Server, fresh: Any, conn: Any
) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    insert(conn, feed, "before")
    assert skus(conn, feed) == ["before"]
    drop_recapture(conn, feed)
    feed.create_source(conn)  # dropped and re-created, without the trigger
    insert(conn, feed, "lost")  # not captured: nothing writes the outbox
    expect_capture_lost(conn, feed, "was dropped and re-created")
    with reader(mssql, conn, feed) as c:
        expect_capture_lost(c, feed, "was dropped and re-created")
        # what changefeed status asks: capture_check, which the reader role may execute
        check = q(mssql_client.object_name("capture_check", feed.spec["feed_id"]))
        with pytest.raises(Exception) as caught:
            run(c, f"exec {feed.schema}.{check};")
        assert mssql_client.error_number(caught.value) == 51068
    assert mssql_client.capture_state(conn, feed.client.info(conn)) == ("trigger", True)
    assert feed.setup(conn) == "repaired"
    assert recapture_enabled(conn, feed)  # setup created the DDL trigger again
    assert feed.setup(conn) == "unchanged"
    insert(conn, feed, "after")
    assert skus(conn, feed) == ["after", "before"]  # "lost" is for the operator to re-emit
    with reader(mssql, conn, feed) as c:
        assert feed.client.read_page(c, 0).cursor is not None
    assert mssql_client.capture_state(conn, feed.client.info(conn)) == ("trigger", False)


def test_a_source_re_created_with_its_trigger_is_found_by_its_object_id(
    fresh: Any, conn: Any
) -> None:
    """A script that drops and re-creates the table with its triggers leaves an enabled
    trigger of the same text: only the object_id tells, and setup repairs it."""
    feed: LiveFeed = fresh("outbox_trigger")
    definition = scalar(conn, f"select object_definition(object_id({lit(trigger(feed))}, N'TR'));")
    drop_recapture(conn, feed)
    feed.create_source(conn)
    run(conn, f"exec sp_executesql {lit(definition)};")
    re_created = scalar(conn, f"select object_id({lit(source(feed))}, N'U');")
    expect_capture_lost(conn, feed, f"{re_created} now)")
    assert feed.setup(conn) == "repaired"
    assert feed.client.read_page(conn, 0).events == []


def test_a_disabled_trigger_fails_readers_until_setup_enables_it(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    run(conn, f"disable trigger {trigger(feed)} on {source(feed)};")
    expect_capture_lost(conn, feed, "disabled")
    assert feed.setup(conn) == "repaired"
    insert(conn, feed, "enabled")
    assert skus(conn, feed) == ["enabled"]


def test_a_dropped_source_loses_nothing_and_fails_nothing(fresh: Any, conn: Any) -> None:
    """As on PostgreSQL: a source that does not exist has no writes to lose."""
    feed: LiveFeed = fresh("outbox_trigger")
    run(conn, f"drop table {source(feed)};")
    assert feed.client.read_page(conn, 0).events == []


def test_upgrade_re_records_the_object_id_and_teardown_drops_the_check(
    fresh: Any, conn: Any
) -> None:
    feed: LiveFeed = fresh("outbox_trigger")
    check = f"{feed.schema}.{q(mssql_client.object_name('capture_check', feed.spec['feed_id']))}"
    drop_recapture(conn, feed)
    feed.create_source(conn)
    assert feed.upgrade(conn) == "upgraded"  # re-creates the trigger and capture_check
    assert feed.client.read_page(conn, 0).events == []
    assert scalar(conn, f"select object_id({lit(check)}, N'P');") is not None
    assert recapture_enabled(conn, feed)
    assert feed.teardown(conn) == "dropped"
    assert scalar(conn, f"select object_id({lit(check)}, N'P');") is None
    assert not recapture_enabled(conn, feed)
