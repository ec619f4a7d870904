"""Invariant O8 on the embedded PostgreSQL server: one key's events are in the order in
which their writes took effect, in every writer mode, with and without row images.

The histories of tests/support/interleave.py make a transaction that wrote another row
first wait for a key's lock until a second transaction, which changed the same key,
commits (an update after an update, a re-insert after a delete, a delete after an
update). The source's own rows say in which order the writes took effect; the feed,
read from its table in ULID order after the mover ran, must say the same, and with row
images each event must carry the row its write left. A mover that orders transactions by
their first outbox row puts the waiting transaction first and fails every history.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from tests.support import interleave
from tests.support.pg_feeds import create_table, registry_row, setup_feed, teardown_feed

from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

SCHEMA = "cf_keyorder"
#: feed table -> (mode, setup options, writer of interleave.Writer, row images)
FEEDS: dict[str, tuple[str, dict[str, Any], str, bool]] = {
    "blocking_images": ("blocking", {"row_image": True}, "blocking", True),
    "outbox_client": ("outbox", {}, "outbox", False),
    "capture": ("outbox", {"capture": "trigger"}, "capture", False),
    "capture_images": ("outbox", {"capture": "trigger", "row_image": True}, "capture", True),
}


@pytest.mark.parametrize("table", FEEDS)
def test_one_keys_events_follow_the_order_its_writes_took_effect(
    table: str, dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    mode, options, writer, images = FEEDS[table]
    feed_id = f"{SCHEMA}.{table}"
    create_table(admin, SCHEMA, table, interleave.COLUMNS)
    teardown_feed(dbt, SCHEMA, table)
    setup_feed(dbt, SCHEMA, table, mode, **options)
    try:
        interleave.run(pg_uri, writer, feed_id)
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            if mode == "outbox":
                assert PostgresFeed(feed_id).move_outbox(conn, 0) == 3 + 3 * 3
            row = registry_row(conn, feed_id)
            assert row is not None
            got = interleave.feed_versions(conn, dict(row["names"]), images)
            want = interleave.expected(interleave.source_rows(conn, feed_id))
    finally:
        teardown_feed(dbt, SCHEMA, table)
    if writer != "blocking":
        # The histories ran as scripted: the waiting transaction a took effect last.
        assert all(versions[-1][0] == "a" for versions in want.values()), want
    for key, versions in want.items():
        if images:
            assert got[key] == versions, f"key {key}: events (writer, image) in feed order"
        else:
            assert [label for label, _ in got[key]] == [label for label, _ in versions], key


def test_the_mover_takes_a_prefix_of_the_order_when_transactions_interleave(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """a's first outbox row comes before all of b's and its last after them: no window of
    max_rows = 1 row holds a whole transaction, so the mover widens its window until one
    does, and moves b (the smaller largest order_sequence) alone, then a."""
    table = "interleaved"
    create_table(admin, SCHEMA, table, interleave.COLUMNS)
    teardown_feed(dbt, SCHEMA, table)
    setup_feed(dbt, SCHEMA, table, "outbox")
    feed = PostgresFeed(f"{SCHEMA}.{table}")
    try:
        with psycopg.connect(pg_uri) as a, psycopg.connect(pg_uri) as b:
            feed.insert_outbox(a, 0, [(1,)])
            feed.insert_outbox(b, 0, [(2,), (3,)])
            b.commit()
            feed.insert_outbox(a, 0, [(4,)])
            a.commit()
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            assert feed.move_outbox(conn, 0, max_rows=1) == 2
            assert feed.move_outbox(conn, 0, max_rows=1) == 2
            assert feed.move_outbox(conn, 0, max_rows=1) == 0
            row = registry_row(conn, f"{SCHEMA}.{table}")
            assert row is not None
            events = conn.execute(
                f'select id from changefeed."{row["names"]["feed"]}" order by ulid'
            ).fetchall()
    finally:
        teardown_feed(dbt, SCHEMA, table)
    assert [e[0] for e in events] == [2, 3, 1, 4]
