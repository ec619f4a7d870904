"""spark.readStream.format("changefeed"): checkpointed restarts give every event exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests import spark_source_kit as kit

from changefeed.spark.datasource import register

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def run_available_now(spark: Any, uri: str, feed: str, sink: Path, checkpoint: Path,
                      **extra: Any) -> Any:  # fmt: skip
    """One availableNow run of the stream into a parquet sink; returns the query."""
    query = (
        spark.readStream.format("changefeed")
        .options(**kit.options(uri, feed, **extra))
        .load()
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return query


def test_restart_from_checkpoint_gives_every_event_once(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    register(spark)
    feed = kit.create_feed(dbt, pg_uri, "outbox", "id bigint primary key, v text")
    keys = ["id"]
    kit.write_outbox(pg_uri, feed, 0, [{"id": i, "v": "a"} for i in range(10)], keys)
    kit.write_outbox(pg_uri, feed, 1, [{"id": i, "v": "a"} for i in range(100, 104)], keys)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    query = run_available_now(spark, pg_uri, feed, sink, checkpoint, pageSize=3)
    assert spark.read.parquet(str(sink)).count() == 14
    offset = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert offset["version"] == 1 and sorted(offset["cursors"]) == ["0", "1"]
    assert all(len(cursor) == 32 for cursor in offset["cursors"].values())

    # Stopped; more events, on an existing shard, in several transactions, and a new shard.
    kit.write_outbox(pg_uri, feed, 0, [{"id": i, "v": "b"} for i in range(5)], keys)
    kit.write_outbox(pg_uri, feed, 0, [{"id": 5, "v": "b"}], keys)
    kit.write_outbox(pg_uri, feed, 7, [{"id": 700, "v": "c"}], keys)
    run_available_now(spark, pg_uri, feed, sink, checkpoint, pageSize=3)
    kit.write_outbox(pg_uri, feed, 1, [{"id": 104, "v": "d"}], keys)
    run_available_now(spark, pg_uri, feed, sink, checkpoint, pageSize=3)
    run_available_now(spark, pg_uri, feed, sink, checkpoint, pageSize=3)  # nothing new

    landed = kit.rows_of(spark.read.parquet(str(sink)), "shard_id", "ulid", "id")
    assert landed == kit.feed_rows(pg_uri, feed)
    assert len(landed) == 14 + 7 + 1
    assert len({(r[0], r[1]) for r in landed}) == len(landed)


def test_a_replayed_micro_batch_reads_the_same_events(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    """A crash after Spark logged a batch's offsets but before it committed the batch:
    the restart runs that batch again from the logged offsets and must see the same
    events (C3), even though more were written in between."""
    register(spark)
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 20, 4)
    kit.write_many_blocking(pg_uri, feed, 2, 100, 6, 6)
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[int, list[tuple[Any, ...]]]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.append((batch_id, kit.rows_of(frame, "shard_id", "ulid", "id")))

    def run() -> None:
        query = (
            spark.readStream.format("changefeed")
            .options(**kit.options(pg_uri, feed, pageSize=5))
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None

    run()
    (first_id, first_rows), *_ = seen
    assert len(first_rows) == 26
    # Forget that the batch was committed, as if the driver died right before.
    commit = checkpoint / "commits" / str(first_id)
    assert commit.exists()
    commit.unlink()
    (checkpoint / "commits" / f".{first_id}.crc").unlink(missing_ok=True)
    kit.write_many_blocking(pg_uri, feed, 0, 21, 8, 4)  # new events meanwhile

    seen.clear()
    run()
    assert seen[0] == (first_id, first_rows)  # the same batch, the same events
    later = [row for _, rows in seen[1:] for row in rows]
    assert sorted(first_rows + later) == kit.feed_rows(pg_uri, feed)


def test_starting_now_skips_history_and_new_shards_start_at_zero(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    register(spark)
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 5, 5)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    run_available_now(spark, pg_uri, feed, sink, checkpoint, startingPosition="now")
    kit.write_many_blocking(pg_uri, feed, 0, 6, 3, 3)
    kit.write_many_blocking(pg_uri, feed, 4, 50, 2, 2)  # a shard that did not exist at "now"
    run_available_now(spark, pg_uri, feed, sink, checkpoint, startingPosition="now")
    landed = kit.rows_of(spark.read.parquet(str(sink)), "shard_id", "id")
    assert landed == [(0, 6), (0, 7), (0, 8), (4, 50), (4, 51)]
