"""Row images (``row_image: true``) on the embedded PostgreSQL server: each event carries
the source row as of its write (protocol 9, invariant O7), written in the writer's
transaction.

Covers: capture by trigger stores the new row of an insert and an update and a delete
marker for a delete (an update that changes the key is a delete of the old key and an
image of the new one), and the mover copies them with the events; a blocking writer
passes them through the client (``insert_events(..., images=...)``); a rolled-back write
leaves none; switching row_image on is applied in place by setup (older events keep no
image), switching it off keeps the images written, which the client still
reads, and upgrade_feed refuses to change it; the Spark source's page SQL takes the
payload from the image and joins back only for events without one; a value other than
true/false fails, listing the accepted values; the writer role may insert images into
the outbox.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from tests.support import row_image_types
from tests.support.dbt_harness import DbtError
from tests.support.pg_feeds import (
    as_role,
    create_table,
    q,
    registry_row,
    setup_feed,
    teardown_feed,
    upgrade_feed,
)

from changefeed.client import InvalidArgument, PostgresFeed
from changefeed.dialects.base import SourceFeed
from changefeed.dialects.postgres.client import load
from changefeed.dialects.postgres.reads import payload_page_sql
from changefeed.dialects.rows import Column
from changefeed.spark.source import (
    BatchBuilder,
    ChangefeedSourceError,
    RowLayout,
    open_backend,
    parse_connection,
)

pytestmark = pytest.mark.postgres

SCHEMA = "cf_images"


def events(conn: psycopg.Connection[Any], names: dict[str, str]) -> list[tuple[Any, ...]]:
    """(key, row_image, row_deleted) of the feed's events in ULID order."""
    rows = conn.execute(
        f"select order_id, row_image, row_deleted from {q(names['feed'])} order by shard_id, ulid"
    ).fetchall()
    return [tuple(r) for r in rows]


def move(conn: psycopg.Connection[Any], names: dict[str, str]) -> None:
    for shard in (0, 1):
        conn.execute(f"call {q(names['move_outbox'])}(%s, 1000)", (shard,))


@pytest.fixture
def captured(dbt: Any, admin: psycopg.Connection[Any]) -> Iterator[dict[str, str]]:
    """`cf_images.orders`, outbox mode with capture: trigger and row images."""
    create_table(
        admin, SCHEMA, "orders", "order_id bigint primary key, status text, amount numeric(8,2)"
    )
    teardown_feed(dbt, SCHEMA, "orders")
    setup_feed(dbt, SCHEMA, "orders", "outbox", capture="trigger", row_image=True)
    row = registry_row(admin, f"{SCHEMA}.orders")
    assert row is not None and row["options"]["row_image"] is True
    yield dict(row["names"])
    teardown_feed(dbt, SCHEMA, "orders")


def test_capture_stores_the_row_as_of_each_write(
    captured: dict[str, str], admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    src = f"{SCHEMA}.orders"
    admin.execute(f"insert into {src} values (1, 'new', 10.50), (2, 'new', 3)")
    admin.execute(f"update {src} set status = 'paid' where order_id = 1")
    with psycopg.connect(pg_uri) as conn:  # two statements, one transaction: two events
        conn.execute(f"update {src} set status = 'packed' where order_id = 1")
        conn.execute(f"update {src} set amount = 11 where order_id = 1")
    with psycopg.connect(pg_uri) as conn:  # rolled back: no event
        conn.execute(f"update {src} set status = 'lost' where order_id = 1")
        conn.rollback()
    admin.execute(f"update {src} set order_id = 3 where order_id = 2")  # a key change
    admin.execute(f"delete from {src} where order_id = 1")
    move(admin, captured)

    def image(key: int, status: str, amount: float) -> dict[str, Any]:
        return {"order_id": key, "status": status, "amount": amount}

    assert events(admin, captured) == [
        (1, image(1, "new", 10.5), False),
        (2, image(2, "new", 3), False),
        (1, image(1, "paid", 10.5), False),
        (1, image(1, "packed", 10.5), False),
        (1, image(1, "packed", 11), False),
        (3, image(3, "new", 3), False),
        (2, None, True),
        (1, None, True),
    ]
    # The two statements of one transaction share one block (O2).
    ulids = [bytes(r[0]) for r in admin.execute(
        f"select ulid from {q(captured['feed'])} order by ulid").fetchall()]  # fmt: skip
    assert ulids[3][:8] == ulids[4][:8] and ulids[3][8:] < ulids[4][8:]
    # read_feed returns them, and the client's events carry them.
    page = PostgresFeed(f"{SCHEMA}.orders").read_page(admin, 0)
    assert [(e.key, e.image, e.deleted) for e in page.events] == [
        ((k,), image, deleted) for k, image, deleted in events(admin, captured)
    ]


def test_writer_role_may_insert_images_into_the_outbox(
    captured: dict[str, str], admin: psycopg.Connection[Any]
) -> None:
    with as_role(admin, captured["writer_role"]):
        admin.execute(
            f"insert into {q(captured['outbox'])} (shard_id, order_id, row_image, row_deleted) "
            """values (1, 9, '{"order_id": 9, "status": "x", "amount": 1}', false)"""
        )
    # A marker that contradicts the image is refused by the table's check.
    with pytest.raises(psycopg.errors.CheckViolation):
        admin.execute(
            f"insert into {q(captured['outbox'])} (shard_id, order_id, row_image, row_deleted) "
            """values (1, 9, '{"order_id": 9}', true)"""
        )
    move(admin, captured)
    assert events(admin, captured) == [(9, {"order_id": 9, "status": "x", "amount": 1}, False)]


@pytest.fixture
def blocking(dbt: Any, admin: psycopg.Connection[Any]) -> Iterator[None]:
    create_table(admin, SCHEMA, "items", "order_id bigint primary key, status text")
    teardown_feed(dbt, SCHEMA, "items")
    setup_feed(dbt, SCHEMA, "items", "blocking")
    yield
    teardown_feed(dbt, SCHEMA, "items")


def test_blocking_writer_passes_images_and_switching_on_is_in_place(
    blocking: None, dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    feed_id = f"{SCHEMA}.items"
    with psycopg.connect(pg_uri) as conn:
        feed = PostgresFeed(feed_id)
        with feed.write(conn, 0) as w:
            conn.execute(f"insert into {feed_id} values (1, 'before'), (2, 'kept')")
            w.insert_events([(1,), (2,)])
            with pytest.raises(InvalidArgument, match="set up without row_image: true"):
                w.insert_events([(1,)], images=[{"order_id": 1, "status": "before"}])

        assert setup_feed(dbt, SCHEMA, "items", "blocking", row_image=True)
        feed = PostgresFeed(feed_id)  # a new client reads the registry again
        with feed.write(conn, 0) as w:
            conn.execute(f"update {feed_id} set status = 'after' where order_id = 1")
            w.insert_events([(1,)], images=[{"order_id": 1, "status": "after"}])
        with feed.write(conn, 0) as w:
            conn.execute(f"delete from {feed_id} where order_id = 1")
            w.insert_events([(1,)], images=[None])
        mismatch = pytest.raises(InvalidArgument, match="1 key\\(s\\) and 2 image\\(s\\)")
        with mismatch, feed.write(conn, 0) as w:
            w.insert_events([(1,)], images=[None, None])
    names = dict((registry_row(admin, feed_id) or {})["names"])
    assert events(admin, names) == [
        (1, None, None),  # written before row_image: joined back by readers
        (2, None, None),
        (1, {"order_id": 1, "status": "after"}, False),
        (1, None, True),
    ]
    # The Spark source's page: the payload from the image, or joined back without one.
    source = SourceFeed(
        load(admin, feed_id, "changefeed"),
        (Column("order_id", "bigint"), Column("status", "text")),
        images=True,
    )
    page = admin.execute(payload_page_sql(source), (0, bytes(16), 100)).fetchall()
    assert [tuple(r[2:]) for r in page] == [
        (1, False, None, None),  # joined back: the key is gone now
        (2, True, 2, "kept"),  # joined back: the row as it is now
        (1, True, 1, "after"),  # its image
        (1, False, None, None),  # its delete marker
    ]
    # setup with the same config is a no-op; upgrade_feed does not switch images off.
    assert any(
        "nothing to do" in m for m in setup_feed(dbt, SCHEMA, "items", "blocking", row_image=True)
    )
    with pytest.raises(
        DbtError,
        match="registered with row_image: true, but upgrade_feed was given row_image: false",
    ):
        upgrade_feed(dbt, SCHEMA, "items", "blocking")

    # Switched off in place: the images written stay, and the client still returns them
    # (the columns decide, not the option); new events have none.
    assert setup_feed(dbt, SCHEMA, "items", "blocking", row_image=False)
    with open_backend(parse_connection(pg_uri)) as backend:
        assert backend.describe(feed_id, payload=True).images, "the Spark source reads them too"
    with psycopg.connect(pg_uri) as conn:
        feed = PostgresFeed(feed_id)
        info = feed.info(conn)
        assert (info.row_image, info.images) == (False, True)
        with feed.write(conn, 0) as w:
            w.insert_events([(2,)])
        page = feed.read_page(conn, 0)
    assert [(e.key, e.image, e.deleted) for e in page.events] == [
        ((1,), None, None),
        ((2,), None, None),
        ((1,), {"order_id": 1, "status": "after"}, False),
        ((1,), None, True),
        ((2,), None, None),
    ]


def test_row_image_accepts_true_or_false_only(dbt: Any, admin: psycopg.Connection[Any]) -> None:
    create_table(admin, SCHEMA, "bad", "order_id bigint primary key")
    with pytest.raises(
        DbtError, match="row_image must be one of true, false \\(default false\\); got: yes"
    ):
        setup_feed(dbt, SCHEMA, "bad", "outbox", row_image="yes")
    assert registry_row(admin, f"{SCHEMA}.bad") is None


def _same(value: Any) -> Any:
    """A value compared by what it is: NaN equal to NaN (nested in lists and dicts too)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


def _payloads(admin: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    """The payload of each event of cf_images.<table>, in ULID order, as the Spark source
    builds it (its page SQL over the images, then its Arrow conversion)."""
    columns = admin.execute(
        "select a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) "
        "from pg_catalog.pg_attribute as a where a.attrelid = %s::regclass and a.attnum > 0 "
        "and not a.attisdropped order by a.attnum",
        (f"{SCHEMA}.{table}",),
    ).fetchall()
    payload = tuple(Column(str(n), str(t)) for n, t in columns)
    source = SourceFeed(load(admin, f"{SCHEMA}.{table}", "changefeed"), payload, images=True)
    rows = admin.execute(payload_page_sql(source), (0, bytes(16), 100)).fetchall()
    batch = BatchBuilder(RowLayout("postgres", source.keys, payload)).build(rows)
    return [dict(p) for p in batch.column("payload").to_pylist()]


def test_images_of_every_value_agree_on_both_writer_paths_and_read_back(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """Infinities, NaN, 40-digit numerics, bytes, time zones with odd offsets, intervals,
    arrays, composite and domain values: the blocking client's image of a row equals the
    capture's to_jsonb of the same row, both read back as the row, and the Spark source
    builds the same payloads from either."""
    row_image_types.create(dbt, admin, SCHEMA)
    row_image_types.write(pg_uri, SCHEMA)
    feeds = {
        table: dict((registry_row(admin, f"{SCHEMA}.{table}") or {})["names"])
        for table in row_image_types.TABLES
    }
    differing = admin.execute(
        "with b as (select pg_catalog.row_number() over (order by f.ulid) as i, f.row_image "
        f"from {q(feeds['typed_client']['feed'])} as f), "
        "c as (select pg_catalog.row_number() over (order by f.ulid) as i, f.row_image "
        f"from {q(feeds['typed_capture']['feed'])} as f) "
        "select b.i, (b.row_image ->> 'id')::int, array(select e.key from "
        "pg_catalog.jsonb_each(c.row_image) as e "
        "where e.value is distinct from b.row_image -> e.key order by 1), "
        "(select pg_catalog.count(*) from pg_catalog.jsonb_object_keys(b.row_image)), "
        f"pg_catalog.jsonb_populate_record(null::{SCHEMA}.typed_capture, b.row_image)::text "
        f"= pg_catalog.jsonb_populate_record(null::{SCHEMA}.typed_capture, c.row_image)::text "
        "from b full join c on c.i = b.i order by 1"
    ).fetchall()
    # Four writes, one event each, the same image on both paths, key by key.
    assert [tuple(r) for r in differing] == [
        (1, 1, [], 21, True),
        (2, 2, [], 21, True),
        (3, 3, [], 21, True),
        (4, 1, [], 21, True),
    ]
    # Each table's newest image of a key reads back as the row itself.
    for table, names in feeds.items():
        mismatched = admin.execute(
            f"select s.id from {SCHEMA}.{table} as s join lateral (select f.row_image "
            f"from {q(names['feed'])} as f where f.id = s.id order by f.ulid desc limit 1) as i "
            f"on true where pg_catalog.jsonb_populate_record(null::{SCHEMA}.{table}, "
            "i.row_image)::text is distinct from s::text"
        ).fetchall()
        assert mismatched == [], table

    client, capture = (_payloads(admin, t) for t in feeds)
    assert _same(client) == _same(capture)
    assert [(p["id"], p["f8"], p["big"]) for p in client if p["id"] != 1] == [
        (2, math.inf, "NaN"),
        (3, pytest.approx(math.nan, nan_ok=True), "Infinity"),
    ]
    first, newest = client[0], client[3]
    assert (newest["f8"], newest["big"], newest["f4"]) == (
        -math.inf,
        "-Infinity",
        pytest.approx(0.1),
    )
    assert first["wide"] == "1234567890123456789012345678901234.56789"
    assert first["amount"] == Decimal("12.34") and first["bin"] == b"\x00\xff\x10"
    assert first["tstz"] == datetime(2024, 6, 1, 6, 30, 0, 500000, tzinfo=timezone.utc)
    assert newest["tstz"] == datetime(1999, 12, 31, 10, 0, tzinfo=timezone.utc)
    assert client[1]["tstz"] == datetime(1950, 6, 1, 12, 44, 30, tzinfo=timezone.utc)
    assert client[1]["ts"] == datetime(99, 12, 31, 23, 59, 59)
    assert first["nums"] == '[1.5,"NaN","-Infinity"]' and first["ints"] == "[1,null,3]"
    assert first["stamps"] == '["2024-01-01T00:00:00+00:00","1950-06-01T12:00:00+00:00"]'
    assert (first["pair"], first["dom"], client[1]["pair"]) == ('(1,"x""y")', "5.50", "(,)")

    # A numeric(p,s) holds NaN, a Spark decimal cannot: the read names the column and the fix.
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"update {SCHEMA}.typed_capture set amount = 'NaN' where id = 3")
    PostgresFeed(f"{SCHEMA}.typed_capture").move_outbox(admin, 0)
    with pytest.raises(
        ChangefeedSourceError,
        match=r"the column amount \(numeric\(12,2\)\) holds NaN.*check \(amount <> 'NaN'\)",
    ):
        _payloads(admin, "typed_capture")
    for table in feeds:
        teardown_feed(dbt, SCHEMA, table)
