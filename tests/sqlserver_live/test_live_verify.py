"""``verify`` against a SQL Server source (docs/spark.md "Verifying a state model"; protocol
section 13): the source read in key chunks by the SQL Server snapshot reader, the read
barrier and the feed's events after the model's position read from SQL Server.

The state is built here as ``changefeed_current_state`` keeps it (the greatest event per
key, its cursor table next to it); tests/test_spark_verify.py runs the real materialization
on PostgreSQL. Runs only with ``CHANGEFEED_SQLSERVER_DSN`` set (conftest.py); never run yet
(no SQL Server on the machine this was written on).
"""

from __future__ import annotations

from typing import Any

from tests.support.sqlserver_live import LiveFeed, Server, run

from changefeed.spark.landing import Landing, request_snapshot
from changefeed.spark.verify import verify

ROWS = 200


def test_verify_finds_a_write_without_an_event_and_counts_one_with_it_in_flight(
    fresh: Any, conn: Any, mssql: Server, spark: Any
) -> None:
    feed: LiveFeed = fresh("outbox_int")
    feed_id = f"{feed.spec['source_schema']}.{feed.spec['source_table']}"
    options = {"connection": mssql.uri, "feed": feed_id}
    values = ", ".join(f"({i}, N'r{i}')" for i in range(1, ROWS + 1))
    run(conn, f"insert into [shop].[orders] (order_id, payload) values {values};")
    spark.sql("create database if not exists live_verify")
    suffix = mssql.database.rsplit("_", 1)[-1]
    landed, state = f"live_verify.landed_{suffix}", f"live_verify.state_{suffix}"
    for name in (landed, state, f"{state}__changefeed_cursor"):
        spark.sql(f"drop table if exists {name}")
    request_snapshot({**options, "payload": "true"})
    landing = Landing(spark, {**options, "payload": "true"}, landed)
    landing.run()
    landing.close()
    spark.sql(
        f"create table {state} using parquet as select order_id, payload from ("
        f"select *, row_number() over (partition by order_id order by ulid desc) as n "
        f"from {landed}) where n = 1 and payload is not null"
    )
    batch = spark.sql(f"select max(changefeed_batch) from {landed}").first()[0]
    spark.sql(f"create table {state}__changefeed_cursor using parquet as select "
              f"cast({batch} as bigint) as changefeed_feed_batch, 16 as changefeed_buckets, "
              "cast(1 as bigint) as changefeed_batch")  # fmt: skip
    result = verify(spark, options, state, landed)
    assert result.ok and result.equal == ROWS, result.lines()

    # A write with its outbox row: in flight. A write without one: a difference.
    run(conn, "begin transaction;\nupdate [shop].[orders] set payload = N'x' where order_id = 1;")
    feed.client.insert_outbox(conn, 0, [[1]])
    run(conn, "commit;")
    run(conn, "delete from [shop].[orders] where order_id = 2;")
    result = verify(spark, options, state, landed)
    assert result.in_flight == 1 and dict(result.counts)["extra"] == 1, result.lines()
    assert [(d.kind, d.key["order_id"]) for d in result.differences] == [("extra", 2)]
