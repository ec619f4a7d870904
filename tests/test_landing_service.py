"""The landing service (``changefeed.spark.landing.LandingService``, ``changefeed land`` with
several feeds): ten feeds of both modes landed into parquet, Delta and Iceberg tables from
one Spark application, one feed's database role cut off mid-run while the others land
on, and a service process SIGKILLed mid-batch and started again; every feed's table holds
each of its events exactly once.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.support import spark_source as kit
from tests.support.dbt_spark import require_lakehouse
from tests.support.doc_blocks import sample

from changefeed.cli import main
from changefeed.spark.landing import (
    ChangefeedSourceError,
    FeedTarget,
    LandingService,
    resolve_targets,
)
from changefeed.spark.source import register

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.postgres, pytest.mark.spark]

COLUMNS = "id bigint primary key, v text"


@pytest.fixture(scope="module")
def registry(pg_uri: str, dbt: Any) -> str:
    """A feed, so that the database has a registry for patterns to be matched against."""
    return kit.create_feed(dbt, pg_uri, "outbox", COLUMNS, schema="svcargs")


def as_user(uri: str, user: str) -> str:
    """``uri`` with another user (no password: the test server trusts its socket)."""
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


def write(uri: str, feed: str, mode: str, first: int, count: int) -> None:
    """``count`` events of new keys ``first ..`` in transactions of up to 5, on shards 0
    and 1 alternately."""
    for n, start in enumerate(range(first, first + count, 5)):
        rows = [{"id": i, "v": f"v{i}"} for i in range(start, min(start + 5, first + count))]
        if mode == "outbox":
            kit.write_outbox(uri, feed, n % 2, rows, ["id"])
        else:
            kit.write_blocking(uri, feed, n % 2, rows, ["id"])


def landed(spark: Any, table: str) -> list[tuple[Any, ...]]:
    """The table's events as this session sees them now: the service writes through
    sessions of its own, so this one's cached listing (parquet) or table (Iceberg's
    catalog cache) is refreshed first."""
    spark.catalog.refreshTable(table)
    rows = spark.sql(f"select shard_id, ulid, id from {table}").collect()
    return [(int(r[0]), bytes(r[1]), r[2]) for r in rows]


def wait_for(
    check: Callable[[], bool], what: str, service: LandingService, timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        status = "\n".join(s.line() for s in service.status())
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{status}"
        time.sleep(0.2)


@pytest.mark.slow
def test_ten_feeds_land_continuously_and_one_cut_off_catches_up(
    spark: Any, pg_uri: str, dbt: Any, admin: Any
) -> None:
    require_lakehouse(spark)
    schema = f"svc_{uuid.uuid4().hex[:6]}"
    role = f"{schema}_app"
    admin.execute(f"create role {role} login superuser")
    modes = ["blocking", "outbox"] * 5
    feeds = [kit.create_feed(dbt, pg_uri, mode, COLUMNS, schema=schema) for mode in modes]
    formats = ["parquet", "delta", "iceberg", "parquet", "delta"] * 2
    cut = {0, 1}  # a blocking and an outbox feed, reached as the role that is cut off
    targets = []
    for n, (feed, fmt) in enumerate(zip(feeds, formats, strict=True)):
        table = f"landing_svc.{feed.split('.')[1]}"
        table = f"iceberg.{table}" if fmt == "iceberg" else table
        uri = as_user(pg_uri, role) if n in cut else pg_uri
        options = kit.options(uri, feed, payload="true", pageSize=4)
        targets.append(FeedTarget(options, table, fmt))
    for feed, mode in zip(feeds, modes, strict=True):
        write(pg_uri, feed, mode, 1, 12)

    results: list[Any] = []
    errors: list[tuple[str, float | None]] = []
    service = LandingService(
        spark, targets, interval=0.5, poll=0.2, workers=4, retry_initial=0.2, retry_max=1.0,
        on_result=lambda t, r: results.append((t.feed, r)),
        on_error=lambda t, e, retry: errors.append((t.feed, retry)),
    )  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:

        def caught_up(indexes: range | list[int], events: int) -> bool:
            """The service's own count: the tables are checked once, at the end."""
            status = service.status()
            return all(status[i].events == events for i in indexes)

        wait_for(lambda: caught_up(range(10), 12), "every feed's first batch", service)
        assert not errors

        # Cut the role off: its connections end, new ones are refused.
        admin.execute(f"alter role {role} nologin")
        admin.execute(f"select pg_terminate_backend(pid) from pg_stat_activity "
                      f"where usename = '{role}'")  # fmt: skip
        for feed, mode in zip(feeds, modes, strict=True):
            write(pg_uri, feed, mode, 100, 8)
        others = [i for i in range(10) if i not in cut]
        wait_for(lambda: caught_up(others, 20), "the reachable feeds' new events", service)
        wait_for(lambda: all(service.status()[i].failures >= 2 for i in cut),
                 "the cut-off feeds' retries", service)  # fmt: skip
        status = service.status()
        for i in cut:
            assert status[i].state in ("retrying", "running"), status[i]
            assert "not permitted to log in" in (status[i].last_error or ""), status[i]
            assert len(landed(spark, targets[i].table)) == 12  # its new events wait
        assert {feed for feed, _ in errors} == {feeds[i] for i in cut}
        assert all(retry is not None and 0 < retry <= 1.0 for _, retry in errors)
        for i in others:  # never failed (a state of "running" is a run in progress)
            assert status[i].state in ("ok", "running") and status[i].failures == 0, status[i]
            assert status[i].last_error is None and status[i].events == 20, status[i]

        admin.execute(f"alter role {role} login")
        wait_for(lambda: caught_up(range(10), 20), "the cut-off feeds catching up", service)
    finally:
        stop.set()
        thread.join(timeout=120)
        service.close()
        admin.execute(f"alter role {role} login")
    assert not thread.is_alive()

    final = service.status()
    for i, (feed, target) in enumerate(zip(feeds, targets, strict=True)):
        rows = landed(spark, target.table)
        assert Counter(rows).most_common(1)[0][1] == 1, f"{feed}: an event landed twice"
        assert sorted(rows) == kit.feed_rows(pg_uri, feed), feed
        assert len(rows) == 20
        assert final[i].events == 20 and final[i].state == "ok", final[i]
    assert {fmt for fmt in formats} == {"parquet", "delta", "iceberg"}
    assert spark.sql(f"describe detail {targets[1].table}").first()["format"] == "delta"
    assert sum(1 for _, r in results if r.batch is not None) == sum(s.batches for s in final)


def test_resolve_targets_matches_patterns_and_names_tables(pg_uri: str, dbt: Any) -> None:
    schema = f"svcp_{uuid.uuid4().hex[:6]}"
    feeds = sorted(kit.create_feed(dbt, pg_uri, "outbox", COLUMNS, schema=schema)
                   for _ in range(3))  # fmt: skip
    shared = {"connection": pg_uri, "payload": "true"}
    targets = resolve_targets(shared, [f"{schema}.*"], "landing.{schema}_{table}")
    assert [t.feed for t in targets] == feeds
    assert [t.table for t in targets] == [f"landing.{f.replace('.', '_')}" for f in feeds]
    assert all(t.source_options["payload"] == "true" for t in targets)
    # A pattern and a name of the same feed: once.
    both = resolve_targets(shared, [feeds[0], f"{schema}.t_*"], "l.{table}", table_format="delta")
    assert [t.feed for t in both] == feeds and {t.table_format for t in both} == {"delta"}

    with pytest.raises(ChangefeedSourceError, match=r"matches no feed registered.*setup_feed"):
        resolve_targets(shared, [f"{schema}_none.*"], "l.{table}")
    with pytest.raises(ChangefeedSourceError, match=r"3 feeds would all land into 'l.t'"):
        resolve_targets(shared, [f"{schema}.*"], "l.t")
    with pytest.raises(ChangefeedSourceError, match=r"'feed' is not a placeholder"):
        resolve_targets(shared, [feeds[0]], "l.{feed}")


def test_a_service_refuses_two_feeds_into_one_table(spark: Any, pg_uri: str) -> None:
    one = FeedTarget(kit.options(pg_uri, "a.one"), "landing.same")
    two = FeedTarget(kit.options(pg_uri, "a.two"), "landing.`same`")
    with pytest.raises(ChangefeedSourceError, match=r"table landing.same is named twice"):
        LandingService(spark, [one, two])
    with pytest.raises(ChangefeedSourceError, match="workers must be a positive number"):
        LandingService(spark, [one], workers=0)


def test_a_one_shot_run_lands_the_others_and_reports_a_failing_feed(
    spark: Any, pg_uri: str, dbt: Any
) -> None:
    feeds = [kit.create_feed(dbt, pg_uri, "outbox", COLUMNS, schema="svco") for _ in range(2)]
    for feed in feeds:
        write(pg_uri, feed, "outbox", 1, 6)
    targets = [FeedTarget(kit.options(pg_uri, f), f"landing_svc.{f.split('.')[1]}") for f in feeds]
    missing = FeedTarget(kit.options(pg_uri, "svco.not_a_feed"), "landing_svc.not_a_feed")
    # The session has the format already: each feed's new session must get it too (Spark
    # refused that registration, looking in the thread's active session instead).
    register(spark)
    service = LandingService(spark, [missing, *targets], retry_initial=0.05, retry_max=0.1)
    try:
        status = service.run_once(attempts=2)
    finally:
        service.close()
    assert [s.state for s in status] == ["failed", "ok", "ok"]
    assert status[0].failures == 2 and "unknown feed 'svco.not_a_feed'" in str(status[0].last_error)
    assert [s.events for s in status] == [0, 6, 6]
    for feed, target in zip(feeds, targets, strict=True):
        assert sorted(landed(spark, target.table)) == kit.feed_rows(pg_uri, feed)


def _service_process(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """``changefeed land`` in a process group of its own (the test SIGKILLs the group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "changefeed.cli", "land", *args], cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )  # fmt: skip


def _parquet_events(location: Path) -> list[tuple[Any, ...]]:
    """A parquet feed table's events straight from its files (hidden staging directories
    are not read, as Spark reads none)."""
    import pyarrow.dataset as ds

    table = ds.dataset(location, format="parquet", partitioning="hive").to_table()
    return sorted(zip(table["shard_id"].to_pylist(), table["ulid"].to_pylist(),
                      table["id"].to_pylist(), strict=True))  # fmt: skip


@pytest.mark.slow
def test_a_service_killed_mid_batch_restarts_with_nothing_lost_or_twice(
    pg_uri: str, dbt: Any, tmp_path: Path, capsys: Any
) -> None:
    """``changefeed land --feeds-file`` (one-shot, three feeds of both modes, a pattern
    among them): its process group is SIGKILLed as soon as one table's write has a staging
    directory; more events are written; the same command lands every feed to its end, and
    each table holds each of its feed's events exactly once."""
    schema = f"svck_{uuid.uuid4().hex[:6]}"
    feeds = [kit.create_feed(dbt, pg_uri, mode, COLUMNS, schema=schema)
             for mode in ("outbox", "outbox", "blocking")]  # fmt: skip
    modes = {feeds[0]: "outbox", feeds[1]: "outbox", feeds[2]: "blocking"}
    for feed in feeds:
        write(pg_uri, feed, modes[feed], 1, 300)
    (tmp_path / "feeds.yml").write_text(
        f"connection: '{pg_uri}'\n"
        "defaults: {payload: true, page_size: 10}\n"
        "feeds:\n"
        f"  - feed: '{schema}.t_outbox_*'\n"
        "    table: 'landing_svck.{table}'\n"
        f"  - feed: {feeds[2]}\n"
        "    table: landing_svck.the_blocking_one\n"
    )
    # The page's command, with a warehouse of the test's own.
    documented = shlex.split(sample("spark-source-service-run"))
    assert documented[:2] == ["changefeed", "land"]
    command = [*documented[2:], "--spark", "local", "--warehouse", "wh"]
    status_file = tmp_path / documented[documented.index("--status-file") + 1]
    tables = tmp_path / "wh" / "landing_svck.db"

    first = _service_process(command, tmp_path)
    deadline = time.monotonic() + 300
    while first.poll() is None:
        assert time.monotonic() < deadline, "the service never wrote a batch"
        if tables.is_dir() and any(
            p.name.startswith(".spark-staging") for t in tables.iterdir() for p in t.iterdir()
        ):
            os.killpg(first.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    out, err = first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL, f"{out}\n{err[-3000:]}"
    assert "3 feeds:" not in out  # it never finished

    for feed in feeds:
        write(pg_uri, feed, modes[feed], 1000, 20)
    second = _service_process(command, tmp_path)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, f"{out}\n{err[-3000:]}"
    assert "changefeed land: 3 feeds: 3 landed, 0 failed" in out, out
    names = {feeds[0]: feeds[0].split(".")[1], feeds[1]: feeds[1].split(".")[1],
             feeds[2]: "the_blocking_one"}  # fmt: skip
    for feed, name in names.items():
        rows = _parquet_events(tables / name)
        assert Counter(rows).most_common(1)[0][1] == 1, f"{feed}: an event landed twice"
        assert rows == [(s, bytes(u), k) for s, u, k in kit.feed_rows(pg_uri, feed)], feed
        assert len(rows) == 320
    status = json.loads(status_file.read_text())
    assert sorted(f["feed"] for f in status["feeds"]) == sorted(feeds)
    assert {f["state"] for f in status["feeds"]} == {"ok"}

    # The status file, read without Spark or a database.
    capsys.readouterr()
    assert main(["status", "--service", str(status_file)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith(f"landing service (pid {second.pid}, not running; written ")
    assert shown[0].endswith(": 3 feeds, 0 failing"), shown
    line = f"  {feeds[2]} -> landing_svck.the_blocking_one: ok, 1 batch, 320 events in 1 run"
    assert line in shown, shown
    assert main(["status", "--service", str(status_file), "--format",
                 "prometheus"]) == 0  # fmt: skip
    metrics = capsys.readouterr().out
    labels = f'feed="{feeds[2]}",table="landing_svck.the_blocking_one"'
    assert f"changefeed_landing_feed_events{{{labels}}} 320" in metrics
    assert f"changefeed_landing_feed_failures{{{labels}}} 0" in metrics

    # SIGTERM of a continuous service (to its process, as `kill PID` sends it) while a
    # batch is in flight: the batch commits, then the service stops, exit code 0.
    for feed in feeds:
        write(pg_uri, feed, modes[feed], 2000, 20)

    def staging() -> set[Path]:
        return {p for t in tables.iterdir() for p in t.iterdir()
                if p.name.startswith(".spark-staging")}  # fmt: skip

    left = staging()  # the SIGKILLed run's
    third = _service_process([*command, "--continuous", "--interval", "0.5"], tmp_path)
    in_flight, deadline = None, time.monotonic() + 300
    while in_flight is None:
        assert third.poll() is None and time.monotonic() < deadline, "no batch in flight"
        in_flight = next((p.parent for p in staging() - left), None)
        time.sleep(0.005)
    third.send_signal(signal.SIGTERM)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, f"{out}\n{err[-3000:]}"
    for feed, name in names.items():
        rows = _parquet_events(tables / name)
        assert Counter(rows).most_common(1)[0][1] == 1, f"{feed}: an event landed twice"
        assert set(rows) <= {(s, bytes(u), k) for s, u, k in kit.feed_rows(pg_uri, feed)}
        assert len(rows) > 320 or tables / name != in_flight, f"{name}: the batch in flight"


def test_the_documented_feeds_file_resolves_as_the_page_says(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """docs/spark-source.md's feeds file is accepted, and names the tables and options the
    page says, against a database with these feeds (no Spark)."""
    import argparse

    from changefeed.cli.land_service import service_targets

    (tmp_path / "feeds.yml").write_text(sample("spark-source-feeds-file"))
    registered = ["billing.invoices", "billing.refunds", "shop.customers", "shop.orders"]
    args = argparse.Namespace(feeds_file=str(tmp_path / "feeds.yml"), feed=None, table=None,
                              table_format=None)  # fmt: skip
    # The database's registry, as it would list these feeds.
    monkeypatch.setattr("changefeed.spark.landing._service._registered", lambda _: registered)
    targets = service_targets(args, {"connection": "postgresql://app@db/shop"})
    assert [(t.feed, t.table, t.table_format) for t in targets] == [
        ("shop.customers", "landing.shop_customers", "delta"),
        ("shop.orders", "landing.shop_orders", "delta"),
        ("billing.invoices", "iceberg.landing.invoices", "iceberg"),
    ]
    assert all(t.source_options["payload"] == "true" for t in targets)
    assert targets[2].source_options["pageSize"] == "5000"
    assert "pageSize" not in targets[0].source_options


@pytest.mark.parametrize(
    ("args", "file", "fragment"),
    [
        (["--feed", "a.b", "--feeds-file", "f.yml"], "feeds: []", "name the feeds twice"),
        (["--feeds-file", "f.yml"], "feeds: [{feed: a.b}]", "entry 1: `table:` is missing"),
        (["--feeds-file", "f.yml"], "feeds: [{feed: a.b, table: l.t, pages: 3}]",
         "entry 1: unknown key(s) pages; accepted: feed, table, table_format"),
        (["--feeds-file", "f.yml"], "feeds: [{feed: a.b, table: l.t, table_format: orc}]",
         "table_format must be one of parquet, delta, iceberg, got 'orc'"),
        (["--feeds-file", "f.yml"], "feeds: {a: 1}", "must be a mapping with a list `feeds:`"),
        (["--feeds-file", "f.yml"], "feeds: [", "is not valid YAML"),
        (["--feeds-file", "missing.yml"], None, "cannot read the feeds file missing.yml"),
        (["--feed", "nosuch_schema.*", "--table", "l.{table}"], None,
         "feed pattern 'nosuch_schema.*' matches no feed registered"),
        (["--feed", "a.b,a.c", "--table", "l.t"], None, "2 feeds would all land into 'l.t'"),
        (["--feed", "a.b,a.c", "--table", "l.{table}", "--continuous", "--attempts", "2"], None,
         "--attempts is for a one-shot run"),
        (["--feed", "a.b,a.c", "--table", "l.{table}", "--workers", "0"], None,
         "--workers must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_service_command_lines_that_cannot_run_name_the_fix(
    pg_uri: str, registry: str, tmp_path: Path, monkeypatch: Any, capsys: Any,
    args: list[str], file: str | None, fragment: str,
) -> None:  # fmt: skip
    """Refused before any Spark starts (resolving a pattern reads the database only)."""
    monkeypatch.chdir(tmp_path)
    if file is not None:
        (tmp_path / "f.yml").write_text(file)
    monkeypatch.setitem(sys.modules, "pyspark", None)  # a Spark start would fail loudly
    code = main(["land", "--connection", pg_uri, *args])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("changefeed land: error: "), err
    assert fragment in err, err


def test_a_services_feeds_create_one_new_schema_one_at_a_time() -> None:
    """Feeds of one service creating their first tables in one new schema at the same moment
    send their `create database` one after the other: two at once make Hive's metastore
    log an AlreadyExistsException with its stack trace. No Spark: a recording session."""
    from types import SimpleNamespace

    from changefeed.spark.feedtable import TableName
    from changefeed.spark.landing import _format

    inside, most, guard = 0, 0, threading.Lock()

    class Session:
        def sql(self, text: str) -> None:
            nonlocal inside, most
            if text.startswith("create database"):
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.05)
                with guard:
                    inside -= 1

    def create(name: str) -> None:
        table = TableName.parse_qualified(f"iceberg.shop_landing.{name}")
        assert table is not None and not table.in_session_catalog
        identity = _format.FeedIdentity(feed=f"shop.{name}", source="db")
        _format.create_table(Session(), table, SimpleNamespace(fields=[]), "iceberg", identity)

    threads = [threading.Thread(target=create, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
