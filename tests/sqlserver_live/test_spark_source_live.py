"""format("changefeed") and land() on a real SQL Server (protocol sections 5, 8 and 11).

Runs only with ``CHANGEFEED_SQLSERVER_DSN`` set (see conftest.py: without it every test
here is skipped with that reason, the one skip allowed in CI). The statements are the
ones ``tests/test_source_sqlserver_queries.py`` pins; here they meet the generated
procedures, with Spark reading the pages in its Python workers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.spark_source import rows_of
from tests.support.sqlserver_live import LiveFeed, Server, run

from changefeed.spark.landing import land
from changefeed.spark.source import register


def options(mssql: Server, feed: LiveFeed, **extra: Any) -> dict[str, str]:
    feed_id = f"{feed.spec['source_schema']}.{feed.spec['source_table']}"
    return {
        "connection": mssql.uri,
        "feed": feed_id,
        **{k: str(v) for k, v in extra.items()},
    }


def everything(feed: LiveFeed, conn: Any, shards: list[int]) -> list[tuple[Any, ...]]:
    return sorted((shard, e.ulid, *e.key) for shard in shards for e in feed.read_all(conn, shard))


def test_batch_read_equals_read_feed(fresh: Any, conn: Any, mssql: Server, spark: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    for shard, first in ((0, 1), (0, 10), (3, 100)):
        feed.write(conn, shard, [[first + i] for i in range(7)])
    register(spark)
    frame = spark.read.format("changefeed").options(**options(mssql, feed, pageSize=5)).load()
    assert frame.schema.simpleString() == "struct<shard_id:int,ulid:binary,order_id:int>"
    assert rows_of(frame) == everything(feed, conn, [0, 3])


def test_outbox_batch_read_with_payload(fresh: Any, conn: Any, mssql: Server, spark: Any) -> None:
    feed: LiveFeed = fresh("outbox_int")
    run(conn, "insert into [shop].[orders] (order_id, payload) values (1, N'one'), (2, N'two');")
    feed.outbox_insert(conn, 1, [[1], [2]])
    feed.outbox_insert(conn, 1, [[3]])  # no source row
    register(spark)
    frame = spark.read.format("changefeed").options(**options(mssql, feed, payload="true")).load()
    got = sorted(frame.collect(), key=lambda r: bytes(r.ulid))
    assert [(r.order_id, r.payload.payload if r.payload else None) for r in got] == [
        (1, "one"), (2, "two"), (3, None),
    ]  # fmt: skip
    assert rows_of(frame, "shard_id", "ulid", "order_id") == everything(feed, conn, [1])


def test_stream_restart_and_landing(
    fresh: Any, conn: Any, mssql: Server, spark: Any, tmp_path: Path
) -> None:
    feed: LiveFeed = fresh("outbox_int")
    register(spark)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def stream() -> Any:
        query = (
            spark.readStream.format("changefeed").options(**options(mssql, feed, pageSize=3))
            .load().writeStream.format("parquet").option("path", str(sink))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(300)
        assert query.exception() is None
        return query

    feed.outbox_insert(conn, 0, [[i] for i in range(5)])
    query = stream()
    # the progress JSON keeps the offset as JSON (PySpark 4.1's SourceProgress.endOffset
    # is the Python repr of the parsed object)
    offset = json.loads(query.lastProgress.json)["sources"][0]["endOffset"]
    assert list(offset["cursors"]) == ["0"]
    feed.outbox_insert(conn, 0, [[i] for i in range(5, 8)])
    feed.outbox_insert(conn, 2, [[100]])
    stream()
    expected = everything(feed, conn, [0, 2])
    assert rows_of(spark.read.parquet(str(sink)), "shard_id", "ulid", "order_id") == expected

    table = "live_landing.orders_" + mssql.database.rsplit("_", 1)[-1]
    assert land(spark, options(mssql, feed), table).events == 9
    feed.outbox_insert(conn, 2, [[101]])
    assert land(spark, options(mssql, feed), table).batch == 2
    landed = spark.table(table)
    assert rows_of(landed, "shard_id", "ulid", "order_id") == everything(feed, conn, [0, 2])


def test_a_landing_refuses_a_table_another_session_lands(
    fresh: Any, conn: Any, mssql: Server, spark: Any
) -> None:
    """The writer lock on a real server: while another session holds the table's applock
    a landing fails at once; once that session ends, the landing proceeds and the table
    records its feed and source."""
    import pytest

    from changefeed.dialects.sqlserver.client import try_writer_lock
    from changefeed.spark.source import ChangefeedSourceError

    feed: LiveFeed = fresh("outbox_int")
    feed.outbox_insert(conn, 0, [[1], [2]])
    table = "live_landing.locked_" + mssql.database.rsplit("_", 1)[-1]
    holder = mssql.connect()
    try:
        assert try_writer_lock(holder, table) is None
        with pytest.raises(ChangefeedSourceError, match=f"table {table} is being landed by "
                           "another landing, another session of this database"):  # fmt: skip
            land(spark, options(mssql, feed), table)
    finally:
        holder.close()
    assert land(spark, options(mssql, feed), table).events == 2
    properties = dict(spark.sql(f"show tblproperties {table}").collect())
    assert properties["changefeed.feed"] == options(mssql, feed)["feed"]
    assert properties["changefeed.source"].startswith("sqlserver:")
    assert properties["changefeed.source"].endswith(f"/{mssql.database}/changefeed")


def test_a_landed_table_follows_a_column_added_and_refuses_a_rename(
    fresh: Any, conn: Any, mssql: Server, spark: Any
) -> None:
    """docs/spark-source.md, "When the source's columns change", on a real server: a column
    added lands in the payload (earlier batches null); a rename (sp_rename keeps the
    column_id) stops the landing before it writes."""
    import pytest

    from changefeed.spark.feedtable import FeedTable, SchemaVersion
    from changefeed.spark.source import ChangefeedSourceError

    feed: LiveFeed = fresh("outbox_int")
    run(conn, "insert into [shop].[orders] (order_id, payload) values (1, N'one');")
    feed.outbox_insert(conn, 0, [[1]])
    table = "live_landing.evolving_" + mssql.database.rsplit("_", 1)[-1]
    with_payload = options(mssql, feed, payload="true")
    assert land(spark, with_payload, table).events == 1
    run(conn, "alter table [shop].[orders] add note nvarchar(20) null;")
    run(conn, "insert into [shop].[orders] (order_id, payload, note) values (2, N'two', N'n2');")
    feed.outbox_insert(conn, 0, [[2]])
    assert land(spark, with_payload, table).batch == 2
    rows = {r.order_id: r.payload.asDict() for r in spark.table(table).collect()}
    assert rows[1]["note"] is None and rows[2]["note"] == "n2", rows
    assert FeedTable.for_name(spark, table).schema_versions() == [
        SchemaVersion(1, 1),
        SchemaVersion(2, 2, ("note",)),
    ]
    run(conn, "exec sp_rename 'shop.orders.note', 'remark', 'COLUMN';")
    feed.outbox_insert(conn, 0, [[2]])
    with pytest.raises(ChangefeedSourceError, match="source column note was renamed to remark"):
        land(spark, with_payload, table)
