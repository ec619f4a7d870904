"""changefeed.spark.landing.land_continuously: events land while they are written, and a
landing that dies (before or after a commit) and starts again leaves the same events.

How fast they land is measured by benchmarks/landing_latency.py, never asserted here.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.support import spark_source as kit

from changefeed.spark.feedtable import BATCH_COLUMN
from changefeed.spark.landing import (
    ChangefeedSourceError,
    _landing,
    check_timing,
    land,
    land_continuously,
)

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[1]

SHARDS = (0, 1, 2)


class Died(BaseException):
    """Stands for the process dying at a stage (in-process: nothing after it runs)."""


def _writer(uri: str, feed: str, until: threading.Event, done: threading.Event) -> None:
    """Blocking transactions of 1 to 4 events, round robin over the shards, about 40 a
    second, until ``until`` is set: the landing runs while they commit."""
    try:
        key, i = 1, 0
        while not until.is_set() and i < 5_000:
            size = 1 + i % 4
            kit.write_many_blocking(uri, feed, SHARDS[i % len(SHARDS)], key, size, size)
            key, i = key + size, i + 1
            time.sleep(0.025)
    finally:
        done.set()


def _start(
    spark: Any, options: Mapping[str, str], table: str, stop: threading.Event, on_stage: Any,
    errors: list[BaseException],
) -> threading.Thread:  # fmt: skip
    def body() -> None:
        try:
            land_continuously(spark, options, table, interval=0.5, poll=0.05, stop=stop,
                              on_stage=on_stage)  # fmt: skip
        except BaseException as exc:  # the test's Died, or a real failure to report
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _finish(
    spark: Any, uri: str, feed: str, table: str, written: threading.Event,
    stop: threading.Event, thread: threading.Thread, errors: list[BaseException],
) -> list[tuple[Any, ...]]:  # fmt: skip
    """Once the writes ended, let the landing catch up, stop it; return the feed's events."""
    assert written.wait(timeout=600)
    expected = kit.feed_rows(uri, feed)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not errors:
        if spark.sql(f"select count(*) from {table}").first()[0] >= len(expected):
            break
        time.sleep(0.2)
    stop.set()
    thread.join(timeout=120)
    assert not errors, errors
    return expected


def test_continuous_landing_dies_twice_and_keeps_every_event_once(
    spark: Any, pg_uri: str, dbt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes go on while a continuous landing runs. It dies after planning batch 2
    (nothing written); started again, it dies just after committing batch 3 (the loop
    never heard of it); started a third time, it lands two more batches while the writes
    go on, and then the rest once they stop. The table holds every event once, in
    contiguous batches that keep each shard's order (F3)."""
    # Warm runs over 30 events read through format("changefeed"), the rest on the driver:
    # both paths of a warm run are taken.
    monkeypatch.setattr(_landing, "DRIVER_READ_LIMIT", 30)
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    table = "landing_continuous.orders"
    options = kit.options(pg_uri, feed, payload="true")
    enough, written = threading.Event(), threading.Event()
    threading.Thread(target=_writer, args=(pg_uri, feed, enough, written), daemon=True).start()
    committed: list[int] = []

    def stage_hook(die_at: tuple[str, int] | None) -> Any:
        def on_stage(at: str, details: Mapping[str, Any]) -> None:
            if (at, details["batch"]) == die_at:
                raise Died(f"{at} {details['batch']}")
            if at == "committed":
                committed.append(details["batch"])
                if die_at is None and len(committed) >= 4:
                    enough.set()

        return on_stage

    for die_at in (("planned", 2), ("committed", 3)):
        errors: list[BaseException] = []
        thread = _start(spark, options, table, threading.Event(), stage_hook(die_at), errors)
        thread.join(timeout=600)
        assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], Died), errors
    assert committed == [1, 2]  # batch 3 committed, unheard of; batch 2 on the re-run

    stop, errors = threading.Event(), []
    thread = _start(spark, options, table, stop, stage_hook(None), errors)
    expected = _finish(spark, pg_uri, feed, table, written, stop, thread, errors)

    landed = spark.sql(f"select shard_id, ulid, id, payload, {BATCH_COLUMN} from {table}").collect()
    assert sorted((r[0], bytes(r[1]), r[2]) for r in landed) == expected  # no loss, no duplicate
    assert all(r.payload.v == f"v{r.id}" for r in landed)
    batches = sorted({r[4] for r in landed})
    assert batches == list(range(1, len(batches) + 1))  # contiguous, none empty
    assert committed[2] == 4  # the third start found batch 3 in the table
    partitions = [r[0] for r in spark.sql(f"show partitions {table}").collect()]
    assert partitions == [f"{BATCH_COLUMN}={b}" for b in batches]
    for shard in SHARDS:  # F3: a shard's batches follow its ULID order
        ulids: dict[int, list[bytes]] = {}
        for r in landed:
            if r[0] == shard:
                ulids.setdefault(r[4], []).append(bytes(r[1]))
        ranges = [(min(ulids[b]), max(ulids[b])) for b in sorted(ulids)]
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), shard


def _command(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``changefeed land`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "changefeed.cli", "land", *argv], capture_output=True, text=True,
        timeout=300, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )  # fmt: skip


def test_a_second_landing_of_a_table_is_refused_and_no_event_lands_twice(
    spark: Any, pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    """Protocol 11 F4, enforced: while a continuous landing runs (writes going on), a
    second landing of its table, as a ``changefeed land`` process and in this process,
    fails at once with one line naming the table, the holder and the fix; the table ends
    with every event exactly once. Then the table's recorded feed: another feed (or the
    same feed of another database) is refused, and a table that records none (landed by an
    earlier version) gets it on its next landing."""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    table = "landing_continuous.single_writer"
    options = kit.options(pg_uri, feed)
    enough, written = threading.Event(), threading.Event()
    threading.Thread(target=_writer, args=(pg_uri, feed, enough, written), daemon=True).start()
    committed = threading.Event()

    def on_stage(at: str, details: Mapping[str, Any]) -> None:
        if at == "committed":
            committed.set()

    stop, errors = threading.Event(), []
    thread = _start(spark, options, table, stop, on_stage, errors)
    assert committed.wait(timeout=300), errors
    started = time.monotonic()
    second = _command("--connection", pg_uri, "--feed", feed, "--table", table, cwd=tmp_path)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 1 and len(lines) == 1, second.stderr[-3000:]
    assert lines[0].startswith(f"changefeed land: error: table {table} is being landed by "
                               "another landing, session pid "), lines  # fmt: skip
    assert "application changefeed-spark" in lines[0]
    assert "stop that landing or wait for it to end" in lines[0]
    assert time.monotonic() - started < 60  # before any Spark start
    with pytest.raises(ChangefeedSourceError, match=f"table {table} is being landed by "):
        land(spark, options, table)
    enough.set()
    expected = _finish(spark, pg_uri, feed, table, written, stop, thread, errors)
    twice = spark.sql(f"select shard_id, ulid from {table} group by shard_id, ulid "
                      "having count(*) > 1").collect()  # fmt: skip
    assert twice == []
    assert kit.rows_of(spark.table(table), "shard_id", "ulid", "id") == expected

    properties = dict(spark.sql(f"show tblproperties {table}").collect())
    source = properties["changefeed.source"]
    assert properties["changefeed.feed"] == feed
    assert source.startswith("postgresql:") and source.endswith("/changefeed")
    spark.sql(f"alter table {table} set tblproperties ('changefeed.feed' = 'shop.other')")
    with pytest.raises(ChangefeedSourceError) as other:
        land(spark, options, table)
    assert str(other.value) == (
        f"table {table} holds feed shop.other of {source}, not feed {feed} of {source}: "
        f"land into another table, or drop {table} and land it again"
    )
    spark.sql(f"alter table {table} set tblproperties ('changefeed.feed' = '{feed}', "
              "'changefeed.source' = 'postgresql:1/elsewhere/changefeed')")  # fmt: skip
    with pytest.raises(ChangefeedSourceError, match="if the database was restored or moved, "
                       f"keep the table with: alter table {table} set tblproperties"):  # fmt: skip
        land(spark, options, table)
    spark.sql(f"alter table {table} unset tblproperties ('changefeed.feed', 'changefeed.source')")
    assert land(spark, options, table).batch is None  # nothing new: no duplicate either
    properties = dict(spark.sql(f"show tblproperties {table}").collect())
    assert (properties["changefeed.feed"], properties["changefeed.source"]) == (feed, source)


_HOLD = """
import sys, time
from changefeed.spark.landing import _landing
options = _landing._landing_options({"connection": sys.argv[1], "feed": sys.argv[2]})
backend = _landing._locked_backend(options, sys.argv[3])
print("holding", flush=True)
time.sleep(600)
"""


def test_a_killed_landing_leaves_the_table_to_the_next(spark: Any, pg_uri: str, dbt: Any) -> None:
    """A process holding a table's writer lock as a landing does (its connection) is
    SIGKILLed: PostgreSQL ends its session, and the next landing proceeds at once.
    (tests/test_landing.py's kill test kills real landings mid-write, then re-runs them.)"""
    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 5, 5)
    table, options = "landing_continuous.killed_holder", kit.options(pg_uri, feed)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, pg_uri, feed, table], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(ChangefeedSourceError, match=r"session pid \d+ "):
            land(spark, options, table)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
    deadline = time.monotonic() + 30
    while True:  # the server notices the closed socket within moments
        try:
            result = land(spark, options, table)
            break
        except ChangefeedSourceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert (result.batch, result.events) == (1, 5)


@pytest.mark.parametrize(
    ("interval", "poll", "message"),
    [
        (0.1, None, "interval must be between 0.5 and 86,400 seconds"),
        (float("nan"), None, "interval must be between"),
        (100_000, None, "interval must be between"),
        (1.0, 0.01, r"poll must be between 0.05 seconds and the interval \(1 s\)"),
        (1.0, 2.0, "poll must be between"),
    ],
)
def test_timing_out_of_range_is_refused(interval: float, poll: float | None, message: str) -> None:
    with pytest.raises(ChangefeedSourceError, match=message):
        check_timing(interval, poll)


def test_timing_defaults_poll_to_the_interval() -> None:
    assert check_timing(60, None) == 60.0
    assert check_timing(1, 0.1) == 0.1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--continuous", "--interval", "0"], "--interval must be between 0.5 and 86,400 seconds"),
        (["--continuous", "--interval", "1", "--poll", "5"],
         "--poll must be between 0.05 seconds and the interval (1 s)"),
        (["--poll", "0.1"], "--poll needs --continuous"),
    ],
)  # fmt: skip
def test_the_command_refuses_bad_timing_before_spark_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from changefeed.cli import main

    code = main(["land", "--connection", "postgresql://app@127.0.0.1:1/shop", "--feed", "a.b",
                 "--table", "landing.b", *flags])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("changefeed land: error: ") and message in err, err
