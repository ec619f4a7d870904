"""Snapshots (docs/protocol.md section 12), on a real PostgreSQL and Spark.

Per feed mode (blocking; outbox with capture: trigger): a source table with rows that have
no events, writer threads inserting, updating, deleting and changing keys throughout; a
snapshot requested, its landing interrupted after its first batch of chunks and resumed,
then a key-range snapshot; the writers stop, the landing catches up, and an SCD1 table
(``changefeed_current_state``, dbt-spark) built from the landed table must equal the source
table, every key and every column. Plus the ULID and chunk arithmetic, and bad input.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.dbt_harness import DbtHarness, package_project
from tests.support.dbt_spark import SCHEMA_MACRO

from changefeed.spark.landing import ChangefeedSourceError, Landing, request_snapshot
from changefeed.spark.landing._snapshot import SnapshotProgress, key_bound
from changefeed.spark.landing._snapshot_plan import (
    CHUNK_LIMIT,
    MAX_CHUNKS,
    chunk_of,
    plan_chunks,
    resume_point,
    snapshot_ulid,
    split_keys,
    ulid_column,
)

#: the scenario (two modes, five landing runs each, one dbt-spark run) took 3 minutes at a
#: load average of 5-9 on 2 cores and 8 at 17, above the suite's 600 s default
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.timeout(1200)]

DATABASE = "snapshot_tests"
ROWS = 3000
CHUNK_ROWS = 400
BATCH_ROWS = 800
MODES = ("blocking", "outbox")

# -- ULIDs and plans (no database) --------------------------------------------------------


def test_snapshot_ulids_fill_the_block_in_chunk_and_row_order() -> None:
    first = bytes.fromhex("0190aabbccdd1234") + (-(7 << 36)).to_bytes(8, "big", signed=True)
    last_of_block = (int.from_bytes(first, "big") + (1 << 36) - 1).to_bytes(16, "big")
    corners = [(0, 0), (0, CHUNK_LIMIT - 1), (1, 0), (MAX_CHUNKS - 1, CHUNK_LIMIT - 1)]
    ulids = [snapshot_ulid(first, j, r) for j, r in corners]
    assert ulids == sorted(ulids) and ulids[0] == first and ulids[-1] == last_of_block
    assert [chunk_of(first, u) for u in ulids] == [0, 0, 1, MAX_CHUNKS - 1]
    assert all(u[:8] == first[:8] for u in ulids)
    column = ulid_column(first, 5, 10, 3).to_pylist()
    assert column == [snapshot_ulid(first, 5, r) for r in (10, 11, 12)]
    with pytest.raises(ChangefeedSourceError, match="more than 2\\^24 rows"):
        ulid_column(first, 0, CHUNK_LIMIT - 1, 2)
    with pytest.raises(ChangefeedSourceError, match="outside \\[0, 4096\\)"):
        snapshot_ulid(first, MAX_CHUNKS, 0)


def test_chunk_plans_cover_the_range_once() -> None:
    sample = [(str(i),) for i in range(100)]
    keys = split_keys(sample, 4)
    assert keys == [("25",), ("50",), ("75",)]
    chunks = plan_chunks(keys, 7, ("3",), False, None)
    assert [c.index for c in chunks] == [7, 8, 9, 10]
    assert (chunks[0].lower, chunks[0].lower_inclusive) == (("3",), False)
    assert [(c.lower, c.upper, c.upper_inclusive) for c in chunks[1:]] == [
        (("25",), ("50",), False), (("50",), ("75",), False), (("75",), None, True)]  # fmt: skip
    assert split_keys([("1",)] * 10, 3) == [("1",)]  # duplicates: fewer, larger chunks
    with pytest.raises(ChangefeedSourceError, match="does not fit the block's 4096 chunks"):
        plan_chunks(keys, MAX_CHUNKS - 2, None, True, None)


def test_resume_point_follows_the_table_head() -> None:
    from changefeed.spark.landing._snapshot_plan import SnapshotRequest

    first = bytes(8) + (3 << 36).to_bytes(8, "big")
    last = bytes(8) + ((4 << 36) - 1).to_bytes(8, "big")
    request = SnapshotRequest(9, 0, first, last, (5,), None)
    assert resume_point(request, None, None) == (0, ("5",), True)
    assert resume_point(request, bytes(16), None) == (0, ("5",), True)
    assert resume_point(request, snapshot_ulid(first, 2, 17), (812,)) == (3, ("812",), False)
    past = (int.from_bytes(last, "big") + 1).to_bytes(16, "big")
    assert resume_point(request, past, None) is None


def test_key_bounds_and_progress_lines() -> None:
    assert key_bound("42", ["id"], "key_from") == "[42]"
    assert key_bound("abc", ["code"], "key_from") == '["abc"]'
    assert key_bound('[1, "x"]', ["a", "b"], "key_to") == '[1, "x"]'
    with pytest.raises(ChangefeedSourceError, match=r"key_from must be a JSON array of 2 values"):
        key_bound("1", ["a", "b"], "key_from")
    with pytest.raises(ChangefeedSourceError, match="none null"):
        key_bound("[null]", ["id"], "key_to")
    line = SnapshotProgress(4, 0, 500_000, 2_000_000, 1, 4, 2.0).line()
    assert line == (
        "snapshot 4 shard 0: 500,000 rows (~2,000,000 estimated), chunks 1/4, "
        "250,000 rows/s, about 6 s left"
    )


# -- PostgreSQL and Spark -------------------------------------------------------------------


def _create(dbt: Any, uri: str, mode: str) -> str:
    table = f"snap_{mode}_{uuid.uuid4().hex[:6]}"
    feed = f"srcs.{table}"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("create schema if not exists srcs")
        conn.execute(f"create table {feed} (id bigint primary key, v text not null, n integer)")
        conn.execute(
            f"insert into {feed} select i, 'v' || i, i % 7 from generate_series(1, {ROWS}) as i"
        )
    args: dict[str, Any] = {"relation": feed, "mode": mode}
    if mode == "outbox":
        args["capture"] = "trigger"
    dbt.run_operation("changefeed.setup_feed", args, target="postgres")
    return feed


class Writers:
    """Two threads changing the source until stopped: inserts, updates, deletes and key
    changes; blocking mode publishes the touched keys, outbox mode's capture trigger does."""

    def __init__(self, uri: str, feed: str, mode: str) -> None:
        self.uri, self.feed, self.mode = uri, feed, mode
        self.stop = threading.Event()
        self.done = [0, 0]
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._loop, args=(t,)) for t in range(2)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _loop(self, number: int) -> None:
        rng = random.Random(number)
        fresh = iter(range(1_000_000 * (number + 1), 1_000_000 * (number + 2)))
        try:
            with psycopg.connect(self.uri, autocommit=True) as conn:
                while not self.stop.is_set():
                    self._one(conn, rng, fresh)
                    self.done[number] += 1
                    time.sleep(0.01)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def _one(self, conn: Any, rng: random.Random, fresh: Iterator[int]) -> None:
        op = rng.choice(("insert", "update", "update", "delete", "rekey"))
        key = rng.randint(1, ROWS)
        if op == "insert":
            new = next(fresh)
            sql, params, keys = f"insert into {self.feed} values (%s, 'i', 0)", (new,), [new]
        elif op == "update":
            sql, params, keys = (f"update {self.feed} set v = v || '+', n = n + 1 where id = %s",
                                 (key,), [key])  # fmt: skip
        elif op == "delete":
            sql, params, keys = f"delete from {self.feed} where id = %s", (key,), [key]
        else:
            new = next(fresh)
            sql, params = f"update {self.feed} set id = %s where id = %s", (new, key)
            keys = [key, new]
        if self.mode == "outbox":
            conn.execute(sql, params)
            return
        conn.execute(f"call {kit.obj(self.feed, 'lock')}(0, null)")
        try:
            with conn.transaction():
                conn.execute(sql, params)
                for k in keys:
                    conn.execute(
                        f"insert into {kit.obj(self.feed, 'feed')} (shard_id, ulid, id) values (0, "
                        f"{kit.obj(self.feed, 'ulid')}(pg_catalog.nextval("
                        f"'{kit.obj(self.feed, 'sequence')}'::regclass)), %s)",
                        (k,),
                    )
                conn.execute(f"select {kit.obj(self.feed, 'update_state')}()")
        except BaseException:
            conn.execute(f"select {kit.obj(self.feed, 'release')}()")
            raise


class Interrupt(Exception):
    pass


def _scenario(spark: Any, pg_uri: str, dbt: Any, mode: str) -> dict[str, Any]:
    feed = _create(dbt, pg_uri, mode)
    table = f"{DATABASE}.{mode}"
    spark.sql(f"drop table if exists {table}")
    options = kit.options(pg_uri, feed, payload="true")
    seen: dict[str, Any] = {"feed": feed, "table": table, "stages": [], "progress": []}

    def landing() -> Landing:
        return Landing(spark, options, table, snapshot_chunk_rows=CHUNK_ROWS,
                       snapshot_batch_rows=BATCH_ROWS)  # fmt: skip

    def interrupt_after_first(stage: str, details: Any) -> None:
        if stage == "snapshot_committed":
            seen["stages"].append(("interrupted run", list(details["chunks"]), details["rows"]))
            raise Interrupt()

    def record(stage: str, details: Any) -> None:
        if stage == "snapshot_committed":
            seen["stages"].append(("resumed run", list(details["chunks"]), details["rows"]))

    first = landing()
    first.run()  # the table exists, with the events so far (none: the rows predate the feed)
    first.close()
    with Writers(pg_uri, feed, mode) as writers:
        time.sleep(0.5)
        seen["request"] = request_snapshot(options)
        killed = landing()
        with pytest.raises(Interrupt):
            killed.run(on_stage=interrupt_after_first)
        killed.close()
        resumed = landing()
        resumed.run(on_stage=record, on_progress=seen["progress"].append)
        resumed.close()
        seen["range"] = request_snapshot(options, key_from="100", key_to="[400]")
        ranged = landing()
        ranged.run()
        ranged.close()
        time.sleep(0.5)
    assert not writers.errors, writers.errors
    seen["writes"] = sum(writers.done)
    final = landing()
    final.run()
    final.close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        seen["source"] = {r[0]: (r[1], r[2]) for r in conn.execute(f"select id, v, n from {feed}")}
        seen["finished"] = conn.execute(
            f"select snapshot_id, finished_at is not null, rows_landed from "
            f"{kit.obj(feed, 'snapshot')} order by snapshot_id"
        ).fetchall()
    return seen


@pytest.fixture(scope="module")
def scenarios(
    spark: Any, pg_uri: str, dbt: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Both modes' snapshots, then one dbt-spark run of an SCD1 model per landed table."""
    spark.sql(f"create database if not exists {DATABASE}")
    spark.sql(f"drop database if exists {DATABASE}_state cascade")
    spark.sql(f"create database {DATABASE}_state")
    seen = {mode: _scenario(spark, pg_uri, dbt, mode) for mode in MODES}
    models = {}
    for mode in MODES:
        relation = f"api.Relation.create(schema='spark_catalog.{DATABASE}', identifier='{mode}')"
        models[f"state_{mode}.sql"] = (
            "{{ config(materialized='changefeed_current_state', unique_key='id', "
            f"file_format='parquet', schema='{DATABASE}_state', alias='{mode}') }}}}\n"
            "select e.shard_id, e.ulid, e.id, e.payload, e.changefeed_feed_batch\n"
            f"from {{{{ changefeed.feed_events({relation}, this) }}}} as e\n"
        )
    root = tmp_path_factory.mktemp("snapshot")
    path = package_project(root / "project", "changefeed_snapshot_tests", models)
    (path / "macros").mkdir(exist_ok=True)
    (path / "macros" / "schema.sql").write_text(SCHEMA_MACRO)
    DbtHarness(root / "dbt", spark=lambda: spark, project_dir=path).invoke(["run"], "spark")
    for mode in MODES:
        rows = spark.sql(
            f"select id, payload.v, payload.n, changefeed_deleted from {DATABASE}_state.{mode}"
        ).collect()
        seen[mode]["state"] = {r[0]: (r[1], r[2]) for r in rows if not r[3]}
        seen[mode]["landed"] = spark.sql(f"select * from {DATABASE}.{mode}").collect()
    return seen


@pytest.mark.parametrize("mode", MODES)
def test_scd1_equals_the_source_after_an_interrupted_snapshot_under_writes(
    scenarios: dict[str, Any], mode: str
) -> None:
    seen = scenarios[mode]
    assert seen["writes"] > 20, "the writers ran during the snapshot"
    interrupted = [s for s in seen["stages"] if s[0] == "interrupted run"]
    resumed = [s for s in seen["stages"] if s[0] == "resumed run"]
    assert interrupted and interrupted[0][1] == [0, 1] and interrupted[0][2] > 0
    assert resumed and resumed[0][1][0] > 1, "the resumed run started after the committed chunks"
    assert seen["state"] == seen["source"], "every key and column of the source, nothing else"
    assert seen["finished"][0][1] and seen["finished"][0][2] >= ROWS * 0.8
    progress = seen["progress"]
    assert progress and progress[-1].finished and progress[-1].rows > 0


@pytest.mark.parametrize("mode", MODES)
def test_snapshot_rows_lie_in_their_block_and_a_key_range_only_reads_its_keys(
    scenarios: dict[str, Any], mode: str
) -> None:
    seen = scenarios[mode]
    request, ranged = seen["request"], seen["range"]
    whole = [r for r in seen["landed"] if request.first_ulid <= bytes(r.ulid) <= request.last_ulid]
    counts = Counter(r.id for r in whole)
    twice = sorted(
        (r.id, chunk_of(request.first_ulid, bytes(r.ulid)), r.changefeed_batch)
        for r in whole
        if counts[r.id] > 1
    )
    assert not twice, f"keys landed twice by one snapshot (key, chunk, batch): {twice[:20]}"
    part = [r for r in seen["landed"] if ranged.first_ulid <= bytes(r.ulid) <= ranged.last_ulid]
    assert part and all(100 <= r.id <= 400 for r in part)
    assert len({r.id for r in part}) == len(part)
    assert all(r.payload is not None for r in whole + part)
    assert [f[1] for f in seen["finished"]] == [True, True]
    # a snapshot's rows are landed as such; the live events around them as what they are
    read = {id(r) for r in whole + part}
    operations = Counter(
        (id(r) in read, r.changefeed_operation, r.payload is None) for r in seen["landed"]
    )
    assert set(operations) <= {(True, "snapshot", False), (False, "upsert", False),
                               (False, "delete", True)}, operations  # fmt: skip
    assert operations[(True, "snapshot", False)] == len(whole) + len(part)


def test_bad_requests_name_the_accepted_form(spark: Any, pg_uri: str, dbt: Any) -> None:
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    options = kit.options(pg_uri, feed)
    with pytest.raises(ChangefeedSourceError, match=r"key_from must be a JSON array of 1 value"):
        request_snapshot(options, key_from="[1, 2]")
    with pytest.raises(ChangefeedSourceError, match="shard must be a 32-bit integer"):
        request_snapshot(options, shard="0")  # type: ignore[arg-type]
    kit.write_many_blocking(pg_uri, feed, 1, 1, 3, 3)
    with pytest.raises(ChangefeedSourceError, match=r"events in shard\(s\) 1 besides 0"):
        request_snapshot(options)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        begin, finish = kit.obj(feed, "snapshot_begin"), kit.obj(feed, "snapshot_finish")
        with pytest.raises(psycopg.Error, match=r"key_to must be null or a JSON array of 1 value"):
            conn.execute(f"select * from {begin}(0, null, '{{\"id\": 1}}')")
        with pytest.raises(psycopg.Error, match="needs a shard_id"):
            conn.execute(f"select * from {begin}(null)")
        with pytest.raises(psycopg.Error, match="no snapshot request 12345"):
            conn.execute(f"select {finish}(12345, 0)")
        sid, first = conn.execute(f"select * from {begin}(1, '[5]', null)").fetchone()
        assert conn.execute(f"select {finish}(%s, 0)", (sid,)).fetchone() == (True,)
        assert conn.execute(f"select {finish}(%s, 0)", (sid,)).fetchone() == (False,)
        head = conn.execute(f"select head from {kit.obj(feed, 'safe_point')}(1)").fetchone()[0]
        block_end = int.from_bytes(bytes(first), "big") + (1 << 36) - 1
        assert bytes(head) == block_end.to_bytes(16, "big"), "the block is allocated, empty"


def test_dbt_operation_records_a_request_the_landing_executes(pg_uri: str, dbt: Any) -> None:
    """``changefeed.request_snapshot`` (macros/feeds.yml): arguments checked first, then one
    request row with its block; the return value is logged by the operation."""
    from tests.support.dbt_harness import DbtError

    feed = kit.create_feed(dbt, pg_uri, "blocking", "a int, b text, primary key (a, b)")
    for args, message in (
        ({"key_from": 5}, "key_from must be a list of 2 value(s), one per key column (a, b)"),
        ({"key_to": [1, None]}, "key_to must be a list of 2 value(s)"),
        ({"shard": "x"}, "shard must be a 32-bit integer (default 0); got: x"),
        # the key's type, checked by snapshot_begin before it records anything (12.1)
        ({"key_to": ["x", "y"]}, 'key_to\'s value "x" does not fit the key column a (integer)'),
    ):
        with pytest.raises(DbtError, match=re.escape(message)):
            dbt.run_operation("changefeed.request_snapshot", {"relation": feed, **args},
                              target="postgres")  # fmt: skip
    # the Python request (changefeed snapshot's) goes through the same check
    with pytest.raises(ChangefeedSourceError, match=r"key_from's value 2147483648 does not fit"):
        request_snapshot(kit.options(pg_uri, feed), key_from="[2147483648, \"x\"]")
    logged = dbt.run_operation(
        "cf_snapshot_call", {"relation": feed, "key_from": [1, "x"]}, target="postgres"
    )
    returned = [json.loads(m.split(": ", 1)[1]) for m in logged if m.startswith("cf_snapshot ")]
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        rows = conn.execute(
            "select snapshot_id, shard_id, encode(first_ulid, 'hex'), key_from, key_to, "
            f"finished_at from {kit.obj(feed, 'snapshot')}"
        ).fetchall()
    # one row: the refused requests recorded nothing
    assert len(rows) == 1 and rows[0][1:] == (0, rows[0][2], '[1, "x"]', None, None)
    assert returned == [{"snapshot_id": rows[0][0], "shard_id": 0, "first_ulid": rows[0][2]}]
    assert any(f"snapshot {rows[0][0]} requested (block {rows[0][2]})" in line for line in logged)


def test_the_docs_examples_run(
    spark: Any, pg_uri: str, dbt: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/snapshot.md's dbt, CLI and Python samples, in that order, on one feed: the
    dbt request is executed by the CLI's landing with the CLI's own request."""
    import shlex

    import yaml
    from tests.support.doc_blocks import sample

    from changefeed.cli import main

    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"insert into {feed} select i, 'v' || i from generate_series(1, 2500) as i")
    table = f"{DATABASE}.docs"
    spark.sql(f"drop table if exists {table}")

    def ours(text: str) -> str:
        return text.replace("shop.orders", feed).replace("landing.orders_feed", table)

    dbt_argv = shlex.split(ours(sample("snapshot-dbt")))
    assert dbt_argv[:3] == ["dbt", "run-operation", "changefeed.request_snapshot"]
    dbt.run_operation(dbt_argv[2], yaml.safe_load(dbt_argv[4]), target="postgres")

    cli = ours(sample("snapshot-cli")).replace("\\\n", " ")
    argv = shlex.split(cli.replace("$CHANGEFEED_CONNECTION", pg_uri))
    assert argv[0] == "changefeed"
    assert main([*argv[1:], "--spark", "existing"]) == 0
    printed = capsys.readouterr().out
    assert "requested snapshot" in printed and "rows/s" in printed and ", done" in printed
    # It ends with what it landed (the dbt request's 1,000 rows and its own 2,500), not
    # with "nothing new" (no live event was written).
    last = printed.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"{re.escape(table)}: snapshots \d+, \d+ landed 3,500 rows; no new live events "
        r"\(1 shard, \d+\.\d s\)",
        last,
    ), last

    code = ours(sample("snapshot-python"))
    exec(compile(code, "docs/snapshot.md", "exec"), {"spark": spark, "connection": pg_uri})
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        done = conn.execute(
            f"select key_from, finished_at is not null, rows_landed from "
            f"{kit.obj(feed, 'snapshot')} order by snapshot_id"
        ).fetchall()
    assert done == [("[1000]", True, 1000), (None, True, 2500), (None, True, 2500)]
    assert spark.table(table).count() == 1000 + 2500 + 2500


def test_a_request_that_cannot_run_fails_alone_and_the_feed_lands_on(
    spark: Any, pg_uri: str, dbt: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/postgres.md's shard expression `region % 4` (a `%`, here `region % 2`): each
    shard's snapshot lands the rows it puts there. A request recorded with a bound its key
    cannot hold (by a snapshot_begin without the type check, as a feed set up before it
    has) fails alone, naming its cancel command, while the other requests and the live
    events land; `changefeed snapshot --cancel` ends it. `changefeed snapshot` into another
    feed's table, or with a bound the key cannot hold, records nothing."""
    from changefeed.cli import main

    table = f"snap_pct_{uuid.uuid4().hex[:6]}"
    feed = f"srcs.{table}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("create schema if not exists srcs")
        conn.execute(f"create table {feed} (id bigint primary key, region smallint, v text)")
        conn.execute(f"insert into {feed} select i, i % 3, 'v' || i from generate_series(1, 40) i")
    dbt.run_operation("changefeed.setup_feed", {"relation": feed, "mode": "outbox",
                      "capture": "trigger", "shard": "region % 2"}, target="postgres")  # fmt: skip
    landed = f"{DATABASE}.pct"
    spark.sql(f"drop table if exists {landed}")
    options = kit.options(pg_uri, feed, payload="true")
    good = [request_snapshot(options, shard=s) for s in (0, 1)]
    bad = request_snapshot(options, shard=0, key_from="5")
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f"update {kit.obj(feed, 'snapshot')} set key_from = '[\"five\"]' "
                     "where snapshot_id = %s", (bad.snapshot_id,))  # fmt: skip
        conn.execute(f"insert into {feed} values (100, 0, 'live'), (101, 1, 'live')")
        source = {r[0]: r[1] for r in conn.execute(f"select id, region from {feed}")}
    stages: list[tuple[str, Any]] = []
    landing = Landing(spark, options, landed)
    try:
        landing.run(on_stage=lambda stage, details: stages.append((stage, details)))
    finally:
        landing.close()
    failed = [d for s, d in stages if s == "snapshot_failed"]
    assert [d["snapshot_id"] for d in failed] == [bad.snapshot_id]
    assert f"snapshot {bad.snapshot_id} of feed {feed} shard 0 cannot run" in failed[0]["error"]
    assert f"--feed {feed} --cancel {bad.snapshot_id}`" in failed[0]["error"]
    rows = spark.table(landed).select("shard_id", "ulid", "id").collect()
    for request in good:
        keys = sorted(r.id for r in rows
                      if request.first_ulid <= bytes(r.ulid) <= request.last_ulid)  # fmt: skip
        assert keys == sorted(k for k, region in source.items() if region % 2 == request.shard)
    assert not [r for r in rows if bad.first_ulid <= bytes(r.ulid) <= bad.last_ulid]
    blocks = [(q.shard, q.first_ulid, q.last_ulid) for q in (*good, bad)]
    live = {r.id: r.shard_id for r in rows
            if not any(s == r.shard_id and f <= bytes(r.ulid) <= t for s, f, t in blocks)}
    assert live == {100: 0, 101: 1}, "the live events landed past the failed request"

    import shlex

    from tests.support.doc_blocks import sample

    documented = sample("snapshot-cancel").replace("$CHANGEFEED_CONNECTION", pg_uri)
    cli = shlex.split(documented.replace("shop.orders", feed))[1:-1]
    assert cli[0] == "snapshot" and cli[-1] == "--cancel"
    assert main([*cli, str(bad.snapshot_id)]) == 0
    assert f"cancelled snapshot {bad.snapshot_id}" in capsys.readouterr().out
    assert main([*cli, str(bad.snapshot_id)]) == 1
    assert "has no pending snapshot request" in capsys.readouterr().err
    stages.clear()
    landing = Landing(spark, options, landed)
    try:
        landing.run(on_stage=lambda stage, details: stages.append((stage, details)))
    finally:
        landing.close()
    assert not [s for s, _ in stages if s.startswith("snapshot")], "nothing pending any more"

    other = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    refused = [(landed, f"table {landed} holds feed {feed}"),
               (f"{DATABASE}.pct_new", "key_from's value \"abc\" does not fit the key column id")]
    for target, message in refused:
        code = main(["snapshot", "--connection", pg_uri, "--feed", other, "--table", target,
                     "--key-from", "abc", "--spark", "existing"])  # fmt: skip
        assert code == 1 and message in capsys.readouterr().err
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        pending = conn.execute(f"select count(*) from {kit.obj(other, 'snapshot')}").fetchone()
    assert pending == (0,), "a refused command recorded no request"
