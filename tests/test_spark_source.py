"""format("changefeed") batch reads against real PostgreSQL feeds (set up with dbt)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit

from changefeed.spark.landing import check_source
from changefeed.spark.source import (
    ChangefeedSourceError,
    open_backend,
    parse_connection,
    parse_options,
    register,
)
from changefeed.ulid import encode_one

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


@pytest.fixture(scope="module")
def blocking(dbt: Any, pg_uri: str, spark: Any) -> dict[str, Any]:
    """A blocking feed keyed by id: shard 0 in 7-event transactions, shard 1 in 3-event
    ones, and a moment between two writes of shard 0 (for timestamp starts)."""
    register(spark)
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 35, 7)
    kit.write_many_blocking(pg_uri, feed, 1, 1000, 12, 3)
    time.sleep(0.005)
    moment = datetime.now(timezone.utc)
    time.sleep(0.005)
    kit.write_many_blocking(pg_uri, feed, 0, 100, 14, 7)
    return {"feed": feed, "moment": moment}


@pytest.fixture(scope="module")
def outbox(dbt: Any, pg_uri: str, spark: Any) -> str:
    """An outbox feed with a composite key and payload columns of several types."""
    register(spark)
    return kit.create_feed(
        dbt, pg_uri, "outbox",
        "region text, n integer, amount numeric(10,2), at timestamptz, tag uuid, doc jsonb, "
        "primary key (region, n)",
    )  # fmt: skip


def read(spark: Any, uri: str, feed: str, **extra: Any) -> Any:
    return spark.read.format("changefeed").options(**kit.options(uri, feed, **extra)).load()


def test_batch_read_equals_the_clients_read(
    spark: Any, pg_uri: str, blocking: dict[str, Any]
) -> None:
    feed = blocking["feed"]
    frame = read(spark, pg_uri, feed, pageSize=5)
    assert frame.schema.simpleString() == "struct<shard_id:int,ulid:binary,id:bigint>"
    expected = kit.client_rows(pg_uri, feed, [0, 1])
    assert len(expected) == 61
    assert kit.rows_of(frame) == expected == kit.feed_rows(pg_uri, feed)


def test_each_shard_is_one_partition_in_ulid_order(
    spark: Any, pg_uri: str, blocking: dict[str, Any]
) -> None:
    from pyspark.sql import functions as F

    # pageSize 5 with 7-event transactions: every page ends at a transaction boundary,
    # so pages are shorter than 5 or longer (a 7-event transaction comes whole).
    frame = read(spark, pg_uri, blocking["feed"], pageSize=5).select(
        "shard_id", "ulid", F.spark_partition_id().alias("part"),
        F.monotonically_increasing_id().alias("seq"),
    )  # fmt: skip
    rows = frame.collect()
    by_shard: dict[int, list[Any]] = {}
    for row in rows:
        by_shard.setdefault(row.shard_id, []).append(row)
    assert sorted(by_shard) == [0, 1]
    for shard_rows in by_shard.values():
        assert len({r.part for r in shard_rows}) == 1
        in_read_order = [bytes(r.ulid) for r in sorted(shard_rows, key=lambda r: r.seq)]
        assert in_read_order == sorted(in_read_order)
        assert len(set(in_read_order)) == len(in_read_order)


def test_starting_positions(spark: Any, pg_uri: str, blocking: dict[str, Any]) -> None:
    feed = blocking["feed"]
    every = kit.feed_rows(pg_uri, feed)
    shard0 = [r for r in every if r[0] == 0]

    # A ULID: strictly after that event, on every shard.
    tenth = shard0[9][1]
    after = kit.rows_of(read(spark, pg_uri, feed, shards="0", startingPosition=encode_one(tenth)))
    assert after == shard0[10:]

    # A timestamp: from the first event of its millisecond.
    moment = blocking["moment"].isoformat().replace("+00:00", "Z")
    late = kit.rows_of(read(spark, pg_uri, feed, startingPosition=moment))
    assert late == [r for r in every if r[0] == 0 and r[2] >= 100]

    # now: nothing yet; beginning: everything.
    assert read(spark, pg_uri, feed, startingPosition="now").count() == 0
    assert kit.rows_of(read(spark, pg_uri, feed, startingPosition="beginning")) == every

    # Offsets pin both ends, so the read is reproducible.
    start = {"0": shard0[6][1].hex()}
    end = {"0": shard0[20][1].hex(), "1": kit.safe_point(pg_uri, feed, 1).hex()}
    pinned = read(spark, pg_uri, feed, startingOffsets=json.dumps(start),
                  endingOffsets=json.dumps(end))  # fmt: skip
    assert kit.rows_of(pinned) == shard0[7:21] + [r for r in every if r[0] == 1]


def test_a_batch_read_is_fixed_when_planned(spark: Any, pg_uri: str, dbt: Any) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 10, 5)
    options = kit.options(pg_uri, feed)
    from changefeed.spark.source._source import describe, partitions_for, plan_cursors

    parsed = parse_options(options)
    info = describe(parsed)
    starts, ends = plan_cursors(parsed, info)
    kit.write_many_blocking(pg_uri, feed, 0, 11, 10, 5)  # after planning
    from changefeed.spark.source._source import read_partition

    (partition,) = partitions_for(parsed, info, starts, ends)
    got = [r for batch in read_partition(partition) for r in batch.to_pylist()]
    assert [r["id"] for r in got] == list(range(1, 11))


def test_outbox_feed_with_payload(spark: Any, pg_uri: str, outbox: str) -> None:
    at = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
    rows = [{"region": "eu", "n": i, "amount": Decimal(f"{i}.25"), "at": at,
             "tag": "9b2e6f3e-6d0c-4c51-9d2b-0c7a1f0e4a11", "doc": json.dumps({"i": i})}
            for i in range(5)]  # fmt: skip
    kit.write_outbox(pg_uri, outbox, 2, rows, ["region", "n"])
    kit.write_outbox(pg_uri, outbox, 2, [{"region": "us", "n": 1}], ["region", "n"])  # no row
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # a deleted row
        conn.execute(f"delete from {outbox} where region = 'eu' and n = 4")

    frame = read(spark, pg_uri, outbox, payload="true")
    assert frame.schema.simpleString() == (
        "struct<shard_id:int,ulid:binary,region:string,n:int,payload:struct<region:string,"
        "n:int,amount:decimal(10,2),at:timestamp,tag:string,doc:string>>"
    )
    got = sorted(frame.collect(), key=lambda r: bytes(r.ulid))
    assert [(r.shard_id, r.region, r.n) for r in got] == [(2, "eu", i) for i in range(5)] + [
        (2, "us", 1)
    ]
    assert kit.rows_of(frame, "shard_id", "ulid", "region", "n") == kit.feed_rows(pg_uri, outbox)
    first = got[0].payload
    assert (first.amount, first.at.astimezone(timezone.utc), first.tag, json.loads(first.doc)) == (
        Decimal("0.25"), at, "9b2e6f3e-6d0c-4c51-9d2b-0c7a1f0e4a11", {"i": 0},
    )  # fmt: skip
    assert got[4].payload is None  # deleted since
    assert got[5].payload is None  # never existed


def test_the_reader_role_reads_every_shard_without_naming_them(
    spark: Any, pg_uri: str, blocking: dict[str, Any]
) -> None:
    """The reader role may not read the state table; shards:<feed> lists the shards."""
    feed = blocking["feed"]
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        (names,) = conn.execute(
            "select names from changefeed.feeds where feed_id = %s", (feed,)
        ).fetchone()  # type: ignore[misc]
        login = f"cf_reader_{feed.split('_')[-1]}"
        conn.execute(f"create role {kit.q(login)} login")
        conn.execute(f"grant {kit.q(names['reader_role'])} to {kit.q(login)}")
    assert pg_uri.startswith("postgresql://postgres:@/")
    as_reader = pg_uri.replace("postgresql://postgres:@/", f"postgresql://{login}:@/", 1)
    with psycopg.connect(as_reader) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(f"select * from changefeed.{kit.q(names['state'])}")
    frame = read(spark, as_reader, feed)
    assert kit.rows_of(frame) == kit.feed_rows(pg_uri, feed)
    assert {r.shard_id for r in frame.select("shard_id").distinct().collect()} == {0, 1}
    # A landing's writer lock and source identity need no grant either.
    check_source(kit.options(as_reader, feed), "landing.reader_probe")  # takes and releases
    with open_backend(parse_connection(as_reader)) as backend:
        assert backend.try_writer_lock("landing.reader_probe") is None
        assert backend.source_identity().startswith("postgresql:")
        assert backend.source_identity().endswith("/postgres")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"feed": "a.b"}, "option connection is missing"),
        ({"connection": "postgresql://x@/db"}, "option feed is missing"),
        ({"connection": "postgresql://x@/db", "feed": "orders"}, "schema.table"),
        ({"connection": "mysql://x@h/db", "feed": "a.b"}, "not a supported URI"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "pageSize": "0"}, "pageSize"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "startPosition": "now"},
         "unknown option"),
        ({"connection": "postgresql://x@/db", "feed": "a.b",
          "startingPosition": "01ARZ3NDEKTSV4RRFFQ69G5FAU"}, "not a valid ULID: invalid char"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "startingPosition": "yesterday"},
         "not understood"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "shards": "1,x"}, "shards"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "startingOffsets": '{"0": "zz"}'},
         "32 hex digits"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "maxEventsPerTrigger": "0"},
         "maxEventsPerTrigger must be a positive integer"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "maxEventsPerTrigger": "1e3"},
         "maxEventsPerTrigger must be a positive integer"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "minEventsPerTrigger": "5",
          "maxTriggerDelay": "soon"}, "maxTriggerDelay must be seconds or a number"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "maxTriggerDelay": "5m"},
         "set that too"),
        ({"connection": "postgresql://x@/db", "feed": "a.b", "consumer": " "},
         "consumer must be a name of 1 to 200 characters"),
    ],
)  # fmt: skip
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(ChangefeedSourceError, match=message):
        parse_options(options)


def test_errors_reach_the_spark_user(spark: Any, pg_uri: str, blocking: dict[str, Any]) -> None:
    register(spark)
    with pytest.raises(
        Exception, match=r"unknown feed .srcs.missing.*registered feeds: .*srcs\.t_"
    ):
        read(spark, pg_uri, "srcs.missing").schema  # noqa: B018
    with pytest.raises(Exception, match="not a valid ULID"):
        read(spark, pg_uri, blocking["feed"], startingPosition="01ARZ3NDEKTSV4RRFFQ69G5FAL").count()
    future = json.dumps({"0": "7f" + "ff" * 15})
    with pytest.raises(
        Exception, match=r"endingOffsets .* is above the safe point on shard\(s\) 0"
    ):
        read(spark, pg_uri, blocking["feed"], endingOffsets=future).count()
    with pytest.raises(Exception, match="maxEventsPerTrigger and minEventsPerTrigger shape"):
        read(spark, pg_uri, blocking["feed"], maxEventsPerTrigger="10").count()
    unreachable = "postgresql://nobody:s3cret@127.0.0.1:1/nothing?connect_timeout=3"
    with pytest.raises(
        Exception, match=r"cannot connect to PostgreSQL at postgresql://nobody:\*\*\*@"
    ) as info:
        spark.read.format("changefeed").option("connection", unreachable).option(
            "feed", "a.b"
        ).load()
    assert "s3cret" not in str(info.value)
