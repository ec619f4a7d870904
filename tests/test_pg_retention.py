"""Retention on PostgreSQL (protocol section 8.1): ``retain:<feed>`` removes what the policy
allows and nothing a registered consumer has not read (unless overridden), and a reader
whose cursor lies below the removed events fails with CF013 instead of skipping them.

Each test sets up its own feed on ``cf_retention.items``: shard 0 gets three transactions
written 10 days ago (2 events), 5 days ago (2 events) and now (1 event), shard 1 one
transaction 10 days ago; the time hints give the ULIDs those times.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from tests.support.pg_feeds import (
    as_role,
    create_table,
    registry_row,
    setup_feed,
    upgrade_feed,
)

from changefeed.client import (
    ZERO_ULID,
    FellBehindRetention,
    InvalidArgument,
    NeedsUpgrade,
    PostgresFeed,
)
from changefeed.client.core import FeedInfo

pytestmark = pytest.mark.postgres

FEED = "cf_retention.items"


def _ulids(conn: psycopg.Connection[Any], shard: int) -> list[bytes]:
    rows = conn.execute(
        'select ulid from changefeed."feed:cf_retention.items" where shard_id = %s order by ulid',
        (shard,),
    ).fetchall()
    return [bytes(r[0]) for r in rows]


@pytest.fixture
def feed(dbt: Any, admin: psycopg.Connection[Any]) -> Iterator[dict[int, list[list[bytes]]]]:
    """The feed, and per shard its transactions' ULIDs, oldest first."""
    create_table(admin, "cf_retention", "items", "id bigint primary key")
    dbt.run_operation(
        "changefeed.teardown_feed", {"relation": {"schema": "cf_retention", "table": "items"}},
        target="postgres",
    )  # fmt: skip
    setup_feed(dbt, "cf_retention", "items", "blocking")
    client = PostgresFeed(FEED)
    now = datetime.now(timezone.utc)
    plan = {0: [(10, [1, 2]), (5, [3, 4]), (0, [5])], 1: [(10, [6])]}
    written: dict[int, list[list[bytes]]] = {}
    for shard, transactions in plan.items():
        for days, keys in transactions:
            before = set(_ulids(admin, shard))
            with client.write(admin, shard, time_hint=now - timedelta(days=days)) as w:
                w.insert_events([(k,) for k in keys])
            written.setdefault(shard, []).append(sorted(set(_ulids(admin, shard)) - before))
    yield written


def test_age_removes_only_older_events_and_records_the_horizon(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    client = PostgresFeed(FEED)
    done = {r.shard_id: r for r in client.retain(admin, max_age=timedelta(days=7))}
    assert {s: r.removed for s, r in done.items()} == {0: 2, 1: 1}
    assert done[0].horizon == feed[0][0][-1] and done[1].horizon == feed[1][0][-1]
    assert done[0].held_for_consumers == 0 and done[0].slowest_consumer is None
    assert _ulids(admin, 0) == feed[0][1] + feed[0][2]
    assert _ulids(admin, 1) == []
    assert client.retention_horizon(admin, 0) == feed[0][0][-1]
    # Run again: nothing more is old enough; the horizon stays.
    again = {r.shard_id: r for r in client.retain(admin, max_age=timedelta(days=7))}
    assert again[0].removed == 0 and again[0].horizon == feed[0][0][-1]


def test_keep_last_keeps_whole_transactions_and_both_rules_keep(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    client = PostgresFeed(FEED)
    # Both rules: an event either rule keeps is kept. keep_last=3 keeps the last two
    # transactions of shard 0; max_age 7 days alone would keep the same.
    done = {r.shard_id: r.removed for r in client.retain(admin, max_age=timedelta(days=1),
                                                          keep_last=3, shard=0)}  # fmt: skip
    assert done == {0: 2}
    assert _ulids(admin, 0) == feed[0][1] + feed[0][2]
    assert _ulids(admin, 1) == feed[1][0]  # another shard: untouched
    # keep_last=2 lands in the middle of the 5-days-old transaction: it is kept whole.
    done = {r.shard_id: r.removed for r in client.retain(admin, keep_last=2, shard=0)}
    assert done == {0: 0}
    done = {r.shard_id: r.removed for r in client.retain(admin, keep_last=1, shard=0)}
    assert done == {0: 2}
    assert _ulids(admin, 0) == feed[0][2]


def test_a_registered_cursor_is_never_passed_without_override(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    client = PostgresFeed(FEED)
    client.save_cursor(admin, "landing", 0, feed[0][0][-1])  # read the first transaction
    done = {r.shard_id: r for r in client.retain(admin, keep_last=0)}
    assert done[0].removed == 2 and done[0].held_for_consumers == 3
    assert done[0].slowest_consumer == "landing"
    # No cursor of "landing" on shard 1: it keeps all of shard 1.
    assert done[1].removed == 0 and done[1].held_for_consumers == 1
    assert _ulids(admin, 0) == feed[0][1] + feed[0][2]
    # The consumer moves on: retention follows it, never past it.
    client.save_cursor(admin, "landing", 0, feed[0][1][-1])
    client.save_cursor(admin, "landing", 1, ZERO_ULID)
    done = {r.shard_id: r.removed for r in client.retain(admin, keep_last=0)}
    assert done == {0: 2, 1: 0}
    assert client.consumers(admin) == [("landing", 0, feed[0][1][-1]), ("landing", 1, ZERO_ULID)]
    # Override: down to the safe point, whatever the consumers have read.
    done = {r.shard_id: r.removed for r in client.retain(admin, keep_last=0,
                                                          override_consumers=True)}  # fmt: skip
    assert done == {0: 1, 1: 1}
    assert _ulids(admin, 0) == [] and _ulids(admin, 1) == []
    assert client.forget_consumer(admin, "landing") == 2
    assert client.consumers(admin) == []


def test_a_reader_below_the_horizon_fails_and_names_the_fix(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    client = PostgresFeed(FEED)
    client.retain(admin, max_age=timedelta(days=7))
    with pytest.raises(FellBehindRetention) as behind:
        client.read_page(admin, 0, ZERO_ULID)
    text = str(behind.value)
    assert "fell behind retention" in text and "Re-snapshot" in text
    assert feed[0][0][-1].hex() in text
    with pytest.raises(FellBehindRetention):  # one event short of the horizon
        client.read_page(admin, 0, feed[0][0][0])
    # At the horizon nothing was missed: the rest reads in order.
    page = client.read_page(admin, 0, feed[0][0][-1])
    assert [e.ulid for e in page.events] == feed[0][1] + feed[0][2]
    # A consumer that re-snapshots continues from the safe point.
    safe = client.safe_point(admin, 1).safe_point
    assert client.read_page(admin, 1, safe).events == []
    # Registering a cursor below the horizon fails the same way.
    with pytest.raises(FellBehindRetention):
        client.save_cursor(admin, "late", 0, ZERO_ULID)


def test_bad_policies_are_refused(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    client = PostgresFeed(FEED)
    with pytest.raises(InvalidArgument, match="needs a policy"):
        client.retain(admin)
    with pytest.raises(InvalidArgument, match="keep_last must be in"):
        client.retain(admin, keep_last=-1)
    with pytest.raises(InvalidArgument, match="max_age must be a timedelta"):
        client.retain(admin, max_age=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="consumer must be a name"):
        client.save_cursor(admin, "", 0, ZERO_ULID)
    retain = 'changefeed."retain:cf_retention.items"'
    for args in ["null, null, false, null", "-1, null, false, null", "null, 1, null, null"]:
        with pytest.raises(psycopg.Error) as refused:
            admin.execute(f"select * from {retain}({args})")
        assert refused.value.sqlstate == "CF007", args
    assert [len(_ulids(admin, s)) for s in (0, 1)] == [5, 1]


def test_roles_readers_register_cursors_only_the_owner_removes(
    feed: dict[int, list[list[bytes]]], admin: psycopg.Connection[Any]
) -> None:
    row = registry_row(admin, FEED)
    assert row is not None
    names = row["names"]
    with as_role(admin, names["reader_role"]) as reader:
        client = PostgresFeed(FEED)
        client.save_cursor(reader, "dbt", 0, feed[0][0][-1])
        assert client.consumers(reader) == [("dbt", 0, feed[0][0][-1])]
        assert client.retention_horizon(reader, 0) is None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            client.retain(reader, keep_last=0)
    with (
        as_role(admin, names["writer_role"]) as writer,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        PostgresFeed(FEED).save_cursor(writer, "w", 0, ZERO_ULID)


def test_a_feed_without_retention_names_the_upgrade() -> None:
    client = PostgresFeed(FEED)
    client._info = FeedInfo(FEED, "changefeed", "blocking", (), {"feed": "feed:x"})
    with pytest.raises(NeedsUpgrade, match="upgrade_feed"):
        client.retain(None, keep_last=1)
    assert client.retention_horizon(None, 0) is None and client.consumers(None) == []


def test_the_dbt_operation_returns_one_mapping_per_shard(
    feed: dict[int, list[list[bytes]]], dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    rel = {"schema": "cf_retention", "table": "items"}
    logged = dbt.run_operation(
        "cf_retention_call", {"relation": rel, "max_age_seconds": 7 * 86400}, target="postgres"
    )
    returned = [m for m in logged if m.startswith("cf_retention returned: ")]
    horizon0, horizon1 = feed[0][0][-1].hex(), feed[1][0][-1].hex()
    assert returned == [
        "cf_retention returned: [{'shard_id': 0, 'removed': 2, 'horizon': '" + horizon0
        + "', 'held_for_consumers': 0, 'slowest_consumer': None}, {'shard_id': 1, 'removed': 1,"
        " 'horizon': '" + horizon1 + "', 'held_for_consumers': 0, 'slowest_consumer': None}]"
    ]  # fmt: skip
    assert f"changefeed: feed {FEED} shard 0: removed 2 event(s), horizon {horizon0}" in logged
    assert _ulids(admin, 0) == feed[0][1] + feed[0][2]
    for args, fragment in [
        ({}, "needs a policy"),
        ({"keep_last": -1}, "keep_last must be a whole number"),
        ({"keep_last": 1, "override_consumers": "yes"}, "override_consumers must be true or false"),
    ]:
        with pytest.raises(Exception, match=fragment):
            dbt.run_operation("changefeed.apply_retention", {"relation": rel, **args},
                              target="postgres")  # fmt: skip


def test_sqlserver_checks_the_policy_before_any_sql(dbt: Any) -> None:
    """SQL Server's apply_retention (tests/sqlserver_live/test_live_retention.py runs it on
    a server) refuses a bad policy before it sends anything: here, on the postgres target,
    its T-SQL would fail to parse if it were sent."""
    for args, fragment in [
        ("none, none, false, none", "needs a policy"),
        ("none, -1, false, none", "keep_last must be a whole number"),
        ("none, 1, 'yes', none", "override_consumers must be true or false"),
    ]:
        with pytest.raises(Exception, match=fragment):
            dbt.render(f"{{{{ changefeed.sqlserver__apply_retention('a.b', {args}) }}}}",
                       "postgres")  # fmt: skip


def test_upgrade_gives_a_feed_without_retention_its_tables_and_routines(
    feed: dict[int, list[list[bytes]]], dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    """A feed as an older package set it up (no retention objects, none in the registry's
    names): retain asks for upgrade_feed, which adds them and keeps the events."""
    kinds = ["retention", "consumer", "retention_pk", "consumer_pk", "retain", "save_cursor",
             "forget_consumer"]  # fmt: skip
    admin.execute('drop function changefeed."retain:cf_retention.items", '
                  'changefeed."save_cursor:cf_retention.items", '
                  'changefeed."forget_consumer:cf_retention.items"')  # fmt: skip
    admin.execute('drop table changefeed."retention:cf_retention.items", '
                  'changefeed."consumer:cf_retention.items"')  # fmt: skip
    admin.execute(
        "update changefeed.feeds set names = names - %s::text[] where feed_id = %s", (kinds, FEED)
    )
    with pytest.raises(NeedsUpgrade, match="upgrade_feed"):
        PostgresFeed(FEED).retain(admin, keep_last=0)
    assert setup_feed(dbt, "cf_retention", "items", "blocking") == [
        f"changefeed: feed {FEED} is already set up (blocking); nothing to do"
    ]
    upgrade_feed(dbt, "cf_retention", "items", "blocking")
    row = registry_row(admin, FEED)
    assert row is not None and set(kinds) <= set(row["names"])
    done = {r.shard_id: r.removed for r in PostgresFeed(FEED).retain(admin, keep_last=1)}
    assert done == {0: 4, 1: 0}
    assert _ulids(admin, 0) == feed[0][2] and _ulids(admin, 1) == feed[1][0]
