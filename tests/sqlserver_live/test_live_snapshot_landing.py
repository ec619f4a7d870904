"""A SQL Server landing executes snapshots (protocol 12.3) on a real server: under
concurrent writes, killed after its first committed batch and resumed, into a local Spark
parquet table whose current state (the greatest event per key) then equals the source
table; a composite key (uniqueidentifier, nvarchar with a collation, bigint) with a
``capture: trigger`` shard expression, one request per shard, each shard's snapshot
holding only the keys the expression puts there.

Runs only with ``CHANGEFEED_SQLSERVER_DSN`` set (conftest.py); never run yet (no SQL
Server on the machine this was written on). ``tests/test_snapshot_sqlserver.py`` checks
the same statements statically; ``tests/test_snapshot.py`` runs this scenario on
PostgreSQL.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest
from tests.support.sqlserver_live import LiveFeed, Server, Threads, run

from changefeed.spark.landing import Landing, request_snapshot
from changefeed.spark.landing._snapshot_plan import chunk_of

ROWS = 2000
CHUNK_ROWS = 300
BATCH_ROWS = 600
DELETED = "<deleted>"


class Interrupt(Exception):
    pass


def options(mssql: Server, feed: LiveFeed) -> dict[str, str]:
    feed_id = f"{feed.spec['source_schema']}.{feed.spec['source_table']}"
    return {"connection": mssql.uri, "feed": feed_id, "payload": "true"}


def table_name(mssql: Server, name: str, spark: Any) -> str:
    spark.sql("create database if not exists live_landing")
    table = f"live_landing.{name}_{mssql.database.rsplit('_', 1)[-1]}"
    spark.sql(f"drop table if exists {table}")
    return table


def landing(spark: Any, mssql: Server, feed: LiveFeed, table: str) -> Landing:
    return Landing(spark, options(mssql, feed), table, snapshot_chunk_rows=CHUNK_ROWS,
                   snapshot_batch_rows=BATCH_ROWS)  # fmt: skip


def current_state(spark: Any, table: str, keys: list[str]) -> dict[tuple[Any, ...], Any]:
    """Per key, the payload of its greatest event (what changefeed_current_state keeps)."""
    latest: dict[tuple[Any, ...], tuple[bytes, Any]] = {}
    for row in spark.table(table).collect():
        key = tuple(row[k] for k in keys)
        value = DELETED if row["payload"] is None else row["payload"]["payload"]
        if key not in latest or bytes(row["ulid"]) > latest[key][0]:
            latest[key] = (bytes(row["ulid"]), value)
    return {k: v for k, (_, v) in latest.items() if v != DELETED}


class OutboxWriters:
    """Two sessions changing ``[shop].[orders]`` and writing the outbox rows of the keys
    they touch in the same transaction, until stopped (a failure is raised on exit)."""

    def __init__(self, mssql: Server, feed: LiveFeed) -> None:
        self.mssql, self.feed = mssql, feed
        self.stop = threading.Event()
        self.done = [0, 0]
        self.threads = Threads()

    def __enter__(self) -> OutboxWriters:
        for number in range(2):
            self.threads.start(self._loop, number)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.threads.join()

    def _loop(self, number: int) -> None:
        rng = random.Random(number)
        fresh = iter(range(100_000 * (number + 1), 100_000 * (number + 2)))
        with self.mssql.connection() as conn:
            while not self.stop.is_set():
                self._one(conn, rng, fresh)
                self.done[number] += 1
                time.sleep(0.003)

    def _one(self, conn: Any, rng: random.Random, fresh: Any) -> None:
        op = rng.choice(("insert", "update", "update", "delete", "rekey"))
        key = rng.randint(1, ROWS)
        if op == "insert":
            new = next(fresh)
            sql, keys = f"insert into [shop].[orders] values ({new}, N'i{new}');", [new]
        elif op == "update":
            sql = f"update [shop].[orders] set payload = payload + N'+' where order_id = {key};"
            keys = [key]
        elif op == "delete":
            sql, keys = f"delete from [shop].[orders] where order_id = {key};", [key]
        else:
            new = next(fresh)
            sql = f"update [shop].[orders] set order_id = {new} where order_id = {key};"
            keys = [key, new]
        run(conn, "begin transaction;\n" + sql)
        try:
            self.feed.client.insert_outbox(conn, 0, [[k] for k in keys])
            run(conn, "commit;")
        except BaseException:
            run(conn, "if @@trancount > 0 rollback;")
            raise


def test_a_killed_snapshot_under_writes_resumes_and_the_state_equals_the_source(
    fresh: Any, conn: Any, mssql: Server, spark: Any
) -> None:
    feed: LiveFeed = fresh("outbox_int")
    values = ", ".join(f"({i}, N'r{i}')" for i in range(1, ROWS + 1))
    run(conn, f"insert into [shop].[orders] (order_id, payload) values {values};")
    table = table_name(mssql, "snapshot", spark)
    first = landing(spark, mssql, feed, table)
    first.run()  # the table exists, empty: the rows predate the feed
    first.close()
    stages: list[tuple[str, list[int], int]] = []

    def interrupt_after_first(stage: str, details: Any) -> None:
        if stage == "snapshot_committed":
            stages.append(("interrupted", list(details["chunks"]), details["rows"]))
            raise Interrupt()

    def record(stage: str, details: Any) -> None:
        if stage == "snapshot_committed":
            stages.append(("resumed", list(details["chunks"]), details["rows"]))

    progress: list[Any] = []
    with OutboxWriters(mssql, feed) as writers:
        time.sleep(0.5)
        request = request_snapshot(options(mssql, feed))
        killed = landing(spark, mssql, feed, table)
        with pytest.raises(Interrupt):
            killed.run(on_stage=interrupt_after_first)
        killed.close()
        assert [s.snapshot_id for s in feed.client.snapshots(conn, pending_only=True)] == [
            request.snapshot_id
        ]
        resumed = landing(spark, mssql, feed, table)
        resumed.run(on_stage=record, on_progress=progress.append)
        resumed.close()
        ranged = request_snapshot(options(mssql, feed), key_from="100", key_to="[400]")
        again = landing(spark, mssql, feed, table)
        again.run()
        again.close()
        time.sleep(0.5)
    assert sum(writers.done) > 20, "the writers ran during the snapshot"
    final = landing(spark, mssql, feed, table)
    final.run()
    final.close()

    assert stages[0][0] == "interrupted" and stages[0][1] == [0, 1] and stages[0][2] > 0
    assert stages[1][0] == "resumed" and stages[1][1][0] == 2, "resumed after chunk 1"
    assert progress and progress[-1].finished
    source = {(r[0],): r[1] for r in run(conn, "select order_id, payload from [shop].[orders]")}
    assert current_state(spark, table, ["order_id"]) == source
    finished = {s.snapshot_id: s for s in feed.client.snapshots(conn)}
    assert finished[request.snapshot_id].finished_at is not None
    assert finished[request.snapshot_id].rows_landed >= ROWS * 0.8
    assert finished[ranged.snapshot_id].finished_at is not None
    landed = spark.table(table).collect()
    block = [r for r in landed
             if ranged.first_ulid <= bytes(r["ulid"]) <= ranged.last_ulid]  # fmt: skip
    assert block and all(100 <= r["order_id"] <= 400 for r in block)
    keys = [r["order_id"] for r in sorted(block, key=lambda r: bytes(r["ulid"]))]
    assert keys == sorted(keys), "snapshot ULIDs follow the key order"
    snapshot = [r for r in landed if request.first_ulid <= bytes(r["ulid"]) <= request.last_ulid]
    assert len({r["order_id"] for r in snapshot}) == len(snapshot), "no key landed twice"
    assert max(chunk_of(request.first_ulid, bytes(r["ulid"])) for r in snapshot) >= 2


def test_a_composite_key_snapshot_per_shard_of_a_trigger_feed(
    fresh: Any, conn: Any, mssql: Server, spark: Any
) -> None:
    """One request per shard of a ``capture: trigger`` feed (shard ``abs(checksum([sku]))
    % 4``): the inserts' events land below the blocks, each request lands only the rows
    the expression puts in its shard (GUIDs compared as their lowercase text, as both
    the landing and pymssql give them), the keyset predicates walk the three-column key,
    and a change made after the requests wins."""
    feed: LiveFeed = fresh("outbox_trigger")
    tenants = [uuid.UUID(int=n * 7919) for n in range(1, 4)]
    rows = [(t, f"Sku-{s:03d}", v) for t in tenants for s in range(60) for v in (1, 2)]
    values = ", ".join(f"('{t}', N'{s}', {v}, N'p-{s}-{v}')" for t, s, v in rows)
    run(conn, f"insert into [shop].[order_lines] values {values};")  # events below the blocks
    table = table_name(mssql, "snapshot_lines", spark)
    requests = [request_snapshot(options(mssql, feed), shard=s) for s in range(4)]
    changed = f"tenant_id = '{tenants[0]}' and sku = N'Sku-007' and version = 2"
    run(conn, f"update [shop].[order_lines] set payload = N'changed' where {changed};")
    lander = landing(spark, mssql, feed, table)
    lander.run()
    lander.close()
    landed = spark.table(table).collect()
    expression = "abs(checksum([sku])) % 4"
    shard_of = {
        (str(r[0]), r[1], r[2]): r[3]
        for r in run(
            conn, f"select tenant_id, sku, version, {expression} from [shop].[order_lines]"
        )
    }
    snapshot_rows = 0
    for request in requests:
        block = [r for r in landed
                 if r["shard_id"] == request.shard
                 and request.first_ulid <= bytes(r["ulid"]) <= request.last_ulid]  # fmt: skip
        assert all(
            shard_of[(r["tenant_id"], r["sku"], r["version"])] == request.shard for r in block
        )
        snapshot_rows += len(block)
    assert snapshot_rows == len(rows), "every key once, in the snapshot of its shard"
    keys = ["tenant_id", "sku", "version"]
    source = {
        (str(r[0]), r[1], r[2]): r[3]
        for r in run(conn, "select tenant_id, sku, version, payload from [shop].[order_lines]")
    }
    assert current_state(spark, table, keys) == source
    assert source[(str(tenants[0]), "Sku-007", 2)] == "changed"
    assert all(s.finished_at is not None for s in feed.client.snapshots(conn))
