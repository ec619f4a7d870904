"""``changefeed status`` and ``changefeed barrier`` against the real embedded PostgreSQL.

The feeds are set up the user's way, by the example's dbt project
(examples/shop/oltp: ``create_shop_tables`` and ``setup_shop_feeds``), in a database of
their own so that no other test's feeds are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import run_without_pyspark
from tests.support.pg_feeds import write_shop_events

from changefeed.cli import main

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.postgres


def _database_uri(server_uri: str, database: str) -> str:
    parts = urllib.parse.urlsplit(server_uri)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="module")
def shop_uri(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh database with the shop's tables and feeds, and a few committed events."""
    import psycopg

    from shop_demo._dbt import DbtProject, postgres_output
    from shop_demo._layout import EXAMPLE_DIR

    with psycopg.connect(pg_uri, autocommit=True) as admin:
        admin.execute("drop database if exists cf_cli_test")
        admin.execute("create database cf_cli_test")
    uri = _database_uri(pg_uri, "cf_cli_test")
    project = DbtProject(EXAMPLE_DIR / "oltp", tmp_path_factory.mktemp("cli-dbt"), "shop_oltp",
                         postgres_output(uri, "public"))  # fmt: skip
    project.invoke(["run-operation", "create_shop_tables"])
    project.invoke(["run-operation", "setup_shop_feeds"])
    write_shop_events(uri, order_shards=(0, 0, 1))
    return uri


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_lists_feeds_shards_and_outbox(shop_uri: str, capsys: Any) -> None:
    code, out, err = cli(capsys, "status", "--connection", shop_uri)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["FEED", "MODE", "SHARD"]
    orders = [line.split() for line in lines if line.startswith("shop.orders")]
    assert [row[2] for row in orders] == ["0", "1"]
    assert all(row[1] == "blocking" and "= head" in " ".join(row) for row in orders)
    payments = [line.split() for line in lines if line.startswith("shop.payments")]
    # The outbox row is not moved yet: shard 0 shows it, and no head.
    assert payments[0][:4] == ["shop.payments", "outbox", "0", "(empty)"]
    assert payments[0][-1] == "1"


def test_status_json_and_cursor_lag(shop_uri: str, capsys: Any) -> None:
    zero = "0" * 26
    code, out, err = cli(capsys, "status", "--connection", shop_uri, "--feed", "shop.orders",
                         "--cursor", f"shop.orders:0={zero}", "--cursor",
                         f"shop.orders:1={'00' * 16}", "--json")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert {s["feed"] for s in data["shards"]} == {"shop.orders"}
    lags = {c["shard"]: c for c in data["consumers"]}
    assert lags[0]["lag_events"] == 2 and lags[1]["lag_events"] == 1
    assert lags[0]["cursor"] is None and lags[0]["oldest_unread_age_s"] >= 0
    head = next(s["head"] for s in data["shards"] if s["shard"] == 0)
    code, out, err = cli(capsys, "status", "--connection", shop_uri, "--feed", "shop.orders",
                         "--cursor", f"shop.orders:0={head}", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["consumers"][0]["lag_events"] == 0


def test_barrier_moves_the_outbox_and_is_released(shop_uri: str, capsys: Any) -> None:
    code, out, err = cli(capsys, "barrier", "--connection", shop_uri, "--feed", "shop.payments",
                         "--timeout", "10")  # fmt: skip
    assert code == 0, err
    assert out.startswith("shop.payments shard 0: released in ")
    code, out, err = cli(capsys, "status", "--connection", shop_uri, "--feed", "shop.payments",
                         "--json")  # fmt: skip
    shard0 = json.loads(out)["shards"][0]
    assert shard0["outbox"] == 0 and shard0["head"] is not None


def test_barrier_waits_for_a_write_that_commits_later(shop_uri: str, capsys: Any) -> None:
    """A --position above the head is released only once a later commit reaches it."""
    import psycopg

    from changefeed.client import PostgresFeed

    feed = PostgresFeed("shop.orders")

    def write_later() -> None:
        time.sleep(0.5)
        with psycopg.connect(shop_uri, autocommit=True) as conn, feed.write(conn, 1) as w:
            w.insert_events([(999_999,)])

    # Every ULID of a later commit is above the current head (A1): wait for head + 1.
    with psycopg.connect(shop_uri, autocommit=True) as conn:
        position = feed.safe_point(conn, 1).head
    thread = threading.Thread(target=write_later)
    started = time.monotonic()
    thread.start()
    target = (int.from_bytes(position, "big") + 1).to_bytes(16, "big").hex()
    code, out, err = cli(capsys, "barrier", "--connection", shop_uri, "--feed", "shop.orders",
                         "--shard", "1", "--position", target, "--timeout", "20")  # fmt: skip
    waited = time.monotonic() - started
    thread.join()
    assert code == 0, err
    assert waited >= 0.45, "released before the write committed"
    assert "shop.orders shard 1: released in" in out


def test_barrier_timeout_names_the_cause(shop_uri: str, capsys: Any) -> None:
    future = "7" + "Z" * 25  # the largest ULID: no safe point reaches it
    code, _out, err = cli(capsys, "barrier", "--connection", shop_uri, "--feed", "shop.orders",
                         "--shard", "0", "--position", future, "--timeout", "0.3")  # fmt: skip
    assert code == 3
    assert "not released within 0.3 s" in err and "pending write(s)" in err
    assert "--timeout" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["status", "--connection", "postgresql://nobody@127.0.0.1:1/shop"],
         ["cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/shop",
          "Check that the server is running"]),
        (["barrier", "--connection", "postgresql://app:secret@127.0.0.1:1/shop", "--feed", "a.b"],
         ["cannot connect to PostgreSQL at postgresql://app:***@127.0.0.1:1/shop"]),
        # A real pymssql login to a port nothing listens on: refused at once.
        (["status", "--connection", "mssql://sa:secret@127.0.0.1:1/shop"],
         ["cannot connect to SQL Server at mssql://sa:***@127.0.0.1:1/shop",
          "Connection refused", "Check that the server is running"]),
        (["barrier", "--connection", "sqlserver://sa@127.0.0.1:1/shop", "--feed", "a.b",
          "--password", "secret"],
         ["cannot connect to SQL Server at sqlserver://sa@127.0.0.1:1/shop"]),
        (["status", "--connection", "mysql://app:secret@db/shop"],
         ["unsupported scheme mysql://", "accepted: postgresql://, postgres://, mssql://, "
          "sqlserver://"]),
        (["status"], ["no database given", "--connection", "CHANGEFEED_CONNECTION"]),
    ],
)  # fmt: skip
def test_connection_errors(args: list[str], expected: list[str], capsys: Any,
                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("CHANGEFEED_CONNECTION", raising=False)
    code, _out, err = cli(capsys, *args)
    assert code == 1
    assert err.startswith(f"changefeed {args[0]}: error: ")
    for text in expected:
        assert text in err
    assert "secret" not in err
    assert "Traceback" not in err


def test_unknown_feed(shop_uri: str, capsys: Any) -> None:
    code, _out, err = cli(capsys, "status", "--connection", shop_uri, "--feed", "shop.nope")
    assert code == 1
    assert "unknown feed 'shop.nope': registered feeds are shop.orders, shop.payments" in err
    assert "setup_feed" in err
    code, _out, err = cli(capsys, "barrier", "--connection", shop_uri, "--feed", "shop.nope")
    assert code == 1
    assert "unknown feed" in err and "shop.orders, shop.payments" in err


def _no_spark(_args: Any) -> Any:
    raise AssertionError("changefeed land started Spark before checking its source")


@pytest.mark.parametrize(
    ("feed", "connection", "fragment"),
    [
        ("shop.nope", None, "shop.nope"),
        ("shop.orders", "postgresql://u@127.0.0.1:1/nowhere", "127.0.0.1"),
    ],
)
def test_land_checks_its_source_before_starting_spark(
    shop_uri: str, feed: str, connection: str | None, fragment: str, capsys: Any,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    """A typo in the feed or the connection is reported at once, not after Spark's start."""
    monkeypatch.setattr("changefeed.cli.land.spark_session", _no_spark)
    args = ["--connection", connection or shop_uri, "--feed", feed, "--table", "landing.orders"]
    code, _out, err = cli(capsys, "land", *args, "--warehouse", str(tmp_path))
    assert code == 1, err
    assert err.startswith("changefeed land: error: ") and fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["barrier", "--feed", "shop.orders", "--position", "01ARZ3NDEKTSV4RRFFQ69G5FAI"],
         "--position '01ARZ3NDEKTSV4RRFFQ69G5FAI' is not a valid ULID"),
        (["barrier", "--feed", "shop.orders", "--position", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"],
         "is not a valid ULID"),
        (["status", "--cursor", "shop.orders:0=short"], "--cursor shop.orders:0 'short' is not"),
        (["status", "--cursor", "shop.orders=01ARZ3NDEKTSV4RRFFQ69G5FAV"], "FEED:SHARD=ULID"),
    ],
)  # fmt: skip
def test_bad_ulid(shop_uri: str, args: list[str], fragment: str, capsys: Any) -> None:
    code, _out, err = cli(capsys, *args[:1], "--connection", shop_uri, *args[1:])
    assert code == 1
    assert fragment in err
    if "valid ULID" in fragment:
        assert "Crockford base32" in err and "01ARZ3NDEKTSV4RRFFQ69G5FAV" in err


def _without_java_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env["PATH"] = str(empty)  # no java on PATH
    env["PYTHONPATH"] = str(REPO / "python")
    return env


def test_missing_java_is_named_with_the_fix(shop_uri: str, tmp_path: Path) -> None:
    """Reading a Spark consumer needs Java; without it the error says how to install it."""
    (tmp_path / "wh" / "metastore_db").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "changefeed.cli", "status", "--connection", shop_uri,
         "--consumer", "shop.orders=shop_landing.orders_feed", "--warehouse",
         str(tmp_path / "wh")],
        env=_without_java_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "changefeed status: error: Java was not found" in result.stderr
    assert "JDK 17" in result.stderr and "JAVA_HOME" in result.stderr
    assert "Traceback" not in result.stderr


def test_status_says_that_spark_is_starting(
    shop_uri: str, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Spark start of --consumer is announced on stderr before it begins (the start
    itself fails here at once, so the test starts no Spark)."""

    def spark_fails(**_kwargs: Any) -> Any:
        raise RuntimeError("no Spark in this test")

    monkeypatch.setattr("changefeed.local.spark.local_spark_session", spark_fails)
    (tmp_path / "metastore_db").mkdir()
    code, out, err = cli(capsys, "status", "--connection", shop_uri, "--consumer",
                         "shop.orders=landing.orders", "--warehouse", str(tmp_path))  # fmt: skip
    assert code == 1 and out == ""
    first, second = err.splitlines()
    assert first.startswith("changefeed status: starting a local Spark for --consumer")
    assert second == "changefeed status: error: Spark did not start: no Spark in this test"


def test_land_says_that_spark_is_starting(
    shop_uri: str, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After its source checks, land announces the Spark start on stderr before it begins
    (the start itself fails here at once, so the test starts no Spark)."""

    def spark_fails(_args: Any) -> Any:
        raise RuntimeError("no Spark in this test")

    monkeypatch.setattr("changefeed.cli.land.spark_session", spark_fails)
    code, out, err = cli(capsys, "land", "--connection", shop_uri, "--feed", "shop.orders",
                         "--table", "landing.orders", "--warehouse", str(tmp_path))  # fmt: skip
    assert code == 1 and out == ""
    first, second = err.splitlines()
    assert first == "changefeed land: starting a local Spark (20-40 s)"
    assert second == "changefeed land: error: Spark did not start: no Spark in this test"


def test_land_refuses_a_startup_setting_it_cannot_apply(
    shop_uri: str, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--spark local starts its own local[2] Spark before --conf applies, so a setting
    Spark reads only at its start is refused before anything starts, naming --spark
    existing (issue 32: --conf spark.master=spark://... landed on local[2] and exited 0).
    --spark existing gives every setting to Spark's start."""
    started: list[Any] = []
    monkeypatch.setattr("changefeed.cli.land.spark_session", started.append)
    for setting in ("spark.master=spark://cluster:7077", "spark.executor.memory=8g"):
        code, out, err = cli(capsys, "land", "--connection", shop_uri, "--feed", "shop.orders",
                             "--table", "landing.orders", "--warehouse", str(tmp_path),
                             "--conf", setting)  # fmt: skip
        key = setting.partition("=")[0]
        assert (code, out) == (1, "") and err.splitlines() == [
            f"changefeed land: error: --conf {key} is read by Spark when it starts, and --spark"
            " local starts its own local[2] Spark in this process before --conf applies; use"
            f" --spark existing, which starts Spark with it (--spark existing --conf {key}=...),"
            " or put it in the spark-defaults.conf of SPARK_CONF_DIR"
        ], err
    assert started == [], "no Spark was started"
    # the same for retention's --spark local
    monkeypatch.setattr("changefeed.cli.spark_retention.start_local_spark", started.append)
    code, out, err = cli(capsys, "retention", "--spark-table", "landing.orders", "--keep-last",
                         "0", "--no-consumers", "--conf", "spark.master=local[4]")  # fmt: skip
    assert (code, out, started) == (1, "", []), err
    assert "error: --conf spark.master is read by Spark when it starts" in err, err

    from changefeed.cli.local_spark import spark_conf

    given = ["spark.master=spark://cluster:7077", "spark.sql.shuffle.partitions=4"]
    existing = argparse.Namespace(spark="existing", conf=given)
    assert spark_conf(existing) == dict(c.split("=", 1) for c in given)
    local = argparse.Namespace(spark="local", conf=["spark.sql.shuffle.partitions=4"])
    assert spark_conf(local) == {"spark.sql.shuffle.partitions": "4"}, "a runtime setting"


def test_land_without_java_names_the_fix(shop_uri: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "changefeed.cli", "land", "--connection", shop_uri,
         "--feed", "shop.orders", "--table", "landing.orders", "--warehouse",
         str(tmp_path / "wh")],
        env=_without_java_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "changefeed land: error: Java was not found" in result.stderr
    assert "JAVA_HOME" in result.stderr
    assert "Traceback" not in result.stderr


def test_status_and_barrier_work_without_pyspark(shop_uri: str) -> None:
    """Only the postgres extra installed: ``import pyspark`` fails, the commands still run."""
    result = run_without_pyspark("status", "--connection", shop_uri)
    assert result.returncode == 0, result.stderr
    assert "shop.orders" in result.stdout and "shop.payments" in result.stdout
    result = run_without_pyspark("barrier", "--connection", shop_uri, "--feed", "shop.payments")
    assert result.returncode == 0, result.stderr
    assert "released in" in result.stdout


def test_the_script_entry_point(shop_uri: str) -> None:
    """The installed ``changefeed`` script (pyproject [project.scripts])."""
    script = Path(sys.executable).with_name("changefeed")
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    result = subprocess.run([str(script), "status", "--connection", shop_uri],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "shop.orders" in result.stdout


def test_no_warning_where_xdg_runtime_dir_is_unset(tmp_path: Path) -> None:
    """pgserver warns at import where XDG_RUNTIME_DIR is unset (most servers): a command
    that checks the catalog's embedded server prints no warning all the same."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["PYTHONWARNINGS"] = "default"
    bare = subprocess.run([sys.executable, "-c", "import pgserver"],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "XDG_RUNTIME_DIR" in bare.stderr  # the warning this test would miss otherwise
    directory = tmp_path / "catalog"
    directory.mkdir()
    (directory / "catalog.json").write_text(json.dumps({"warehouse": str(tmp_path), "port": 1}))
    result = subprocess.run(
        [sys.executable, "-m", "changefeed.cli", "catalog", "stop", "--dir", str(directory)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "stopped the server" in result.stdout
    assert "Warning" not in result.stderr, result.stderr


def test_a_continuous_landing_says_nothing_new_at_most_once_a_minute(capsys: Any) -> None:
    """Polled every 0.1 s for 3 minutes with one batch: an idle line at 0, 1, 2 and 3
    minutes (1% early) by default, one per run with --verbose, none with --quiet; every
    landed batch is printed (but with --quiet), with singular nouns and a rate that is
    not rounded to 0."""
    from changefeed.cli.land import IDLE_LINE_SECONDS, Printer
    from changefeed.spark.landing import LandingResult

    def lines(**kwargs: bool) -> list[str]:
        now = [0.0]
        printer = Printer(1.0, clock=lambda: now[0], **kwargs)
        for run in range(1800):
            now[0] = run * 0.1 + 0.05
            batch = 7 if run == 900 else None
            # run 901 executed a snapshot and found no live event: not idle
            snapshot = ((8,), 5002) if run == 901 else ((), 0)
            printer(LandingResult("l.t", batch, 3 if batch else 0, {}, {0: b""}, 0.05, *snapshot))
        return capsys.readouterr().out.splitlines()

    default = lines()
    assert IDLE_LINE_SECONDS == 60.0
    idle = "l.t: nothing new (1 shard, 0.1 s)"
    batch = "l.t: batch 7, 3 events from 1 shard in 0.1 s (60 events/s)"
    snapshot = "l.t: snapshot 8 landed 5,002 rows; no new live events (1 shard, 0.1 s)"
    assert default == [idle, idle, batch, snapshot, idle, idle]
    assert len(lines(verbose=True)) == 1800
    assert lines(quiet=True) == []
    slow = LandingResult("l.t", 2, 3, {}, {0: b"", 1: b""}, 10.0).summary()
    assert slow == "l.t: batch 2, 3 events from 2 shards in 10.0 s (0.3 events/s)"


def test_verbose_and_quiet_need_continuous(capsys: Any) -> None:
    code = main(["land", "--connection", "postgresql://x@h/db", "--feed", "a.b", "--table",
                 "l.b", "--quiet"])  # fmt: skip
    assert code == 1
    assert "--quiet needs --continuous" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["land", "--connection", "postgresql://x@h/db", "--feed", "a.b", "--table", "l.b",
              "--continuous", "--quiet", "--verbose"])  # fmt: skip
    assert "not allowed with argument" in capsys.readouterr().err
