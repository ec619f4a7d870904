"""``changefeed status --format prometheus`` and ``changefeed retention`` against the real
embedded PostgreSQL: the exposition parses strictly and carries every documented metric,
a lost capture and a consumer behind retention are flagged in every format, and retention
never passes a registered consumer without ``--override-consumers``.

Feeds live in the default database under ``cf_cli_ops``; every command names them with
``--feed``, so other tests' feeds do not matter.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support.exposition import parse
from tests.support.pg_feeds import create_table, setup_feed, teardown_feed

from changefeed.cli import main
from changefeed.cli.metrics import METRICS
from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
ITEMS, LOG = "cf_cli_ops.items", "cf_cli_ops.log"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def feeds(dbt: Any, admin: psycopg.Connection[Any]) -> None:
    """``cf_cli_ops.items`` (outbox, capture: trigger, one captured insert) and
    ``cf_cli_ops.log`` (blocking, empty)."""
    for table, columns in [("items", "id bigint primary key"), ("log", "id bigint primary key")]:
        teardown_feed(dbt, "cf_cli_ops", table)
        create_table(admin, "cf_cli_ops", table, columns)
    setup_feed(dbt, "cf_cli_ops", "items", "outbox", capture="trigger")
    setup_feed(dbt, "cf_cli_ops", "log", "blocking")
    admin.execute("insert into cf_cli_ops.items values (1)")


def test_the_exposition_parses_and_carries_every_documented_metric(
    feeds: None, pg_uri: str, admin: psycopg.Connection[Any], capsys: Any
) -> None:
    log = PostgresFeed(LOG)
    with log.write(admin, 0) as w:
        w.insert_events([(1,)])
    zero = "0" * 26
    code, out, err = cli(capsys, "status", "--connection", pg_uri, "--feed", ITEMS, "--feed",
                         LOG, "--cursor", f"{LOG}:0={zero}", "--format", "prometheus")  # fmt: skip
    assert code == 0, err
    families = parse(out)
    assert list(families) == list(METRICS)  # every family, documented order, HELP and TYPE
    assert all(f.type == "gauge" and f.help == METRICS[f.name] for f in families.values())
    info = families["changefeed_feed_info"]
    assert info.value(feed=ITEMS) == 1 and info.value(feed=LOG, mode="blocking", capture="none")
    assert families["changefeed_capture_lost"].samples == {(("feed", ITEMS),): 0}
    assert families["changefeed_outbox_rows"].value(feed=ITEMS, shard="0") == 1
    assert families["changefeed_pending_writes"].value(feed=LOG, shard="0") == 0
    assert families["changefeed_oldest_pending_write_age_seconds"].value(feed=LOG) == 0
    head = families["changefeed_head_timestamp_seconds"].value(feed=LOG, shard="0")
    assert abs(head - time.time()) < 60
    assert families["changefeed_safe_point_timestamp_seconds"].value(feed=LOG) == head
    lag = {"consumer": f"--cursor {LOG}:0", "feed": LOG, "shard": "0"}
    assert families["changefeed_consumer_lag_events"].value(**lag) == 1
    assert 0 <= families["changefeed_consumer_lag_seconds"].value(**lag) < 60
    assert families["changefeed_consumer_behind_retention"].value(**lag) == 0
    # --json and --format json are the same; --json with another format contradicts.
    assert cli(capsys, "status", "--connection", pg_uri, "--feed", LOG, "--json")[1] == cli(
        capsys, "status", "--connection", pg_uri, "--feed", LOG, "--format", "json"
    )[1]  # fmt: skip
    code, _out, err = cli(capsys, "status", "--connection", pg_uri, "--json", "--format", "text")
    assert code == 1 and "--json and --format text contradict" in err


def test_a_pending_write_shows_its_age(
    feeds: None, pg_uri: str, admin: psycopg.Connection[Any], capsys: Any
) -> None:
    with PostgresFeed(LOG).write(admin, 3) as w:
        w.insert_events([(30,)])
        time.sleep(0.3)
        code, out, err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG,
                             "--format", "prometheus")  # fmt: skip
        assert code == 0, err
        families = parse(out)
        assert families["changefeed_pending_writes"].value(feed=LOG, shard="3") == 1
        age = families["changefeed_oldest_pending_write_age_seconds"].value(feed=LOG, shard="3")
        assert 0.25 <= age < 60
        code, out, err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG, "--json")
        shard3 = next(s for s in json.loads(out)["shards"] if s["shard"] == 3)
        assert shard3["pending"] == 1 and shard3["oldest_pending_age_s"] >= 0.25
        code, out, err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG)
        (row,) = [line for line in out.splitlines() if line.startswith(LOG) and "(oldest " in line]
        assert row.split()[2] == "3"


def test_a_lost_capture_is_flagged_in_every_format(
    feeds: None, pg_uri: str, admin: psycopg.Connection[Any], capsys: Any
) -> None:
    code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", ITEMS)
    assert code == 0 and "CAPTURE LOST" not in out
    admin.execute("alter table cf_cli_ops.items disable trigger user")
    try:
        code, out, err = cli(capsys, "status", "--connection", pg_uri, "--feed", ITEMS)
        assert code == 0, err
        assert f"CAPTURE LOST: {ITEMS} (capture: trigger)" in out
        assert "CF011" in out and "changefeed.setup_feed" in out and "re-emit" in out
        code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", ITEMS,
                              "--format", "prometheus")  # fmt: skip
        assert parse(out)["changefeed_capture_lost"].value(feed=ITEMS) == 1
        code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", ITEMS, "--json")
        assert json.loads(out)["feeds"] == [
            {"feed": ITEMS, "mode": "outbox", "capture": "trigger", "capture_lost": True}
        ]
    finally:
        admin.execute("alter table cf_cli_ops.items enable trigger user")


def test_retention_keeps_what_a_registered_consumer_has_not_read(
    feeds: None, pg_uri: str, admin: psycopg.Connection[Any], capsys: Any
) -> None:
    log = PostgresFeed(LOG)
    old = datetime.now(timezone.utc) - timedelta(days=10)
    for key, hint in [(101, old), (102, old), (103, None)]:
        with log.write(admin, 7, time_hint=hint) as w:
            w.insert_events([(key,)])
    first = log.read_page(admin, 7, page_size=1).cursor
    log.save_cursor(admin, "landing", 7, first)
    code, out, err = cli(capsys, "retention", "--connection", pg_uri, "--feed", LOG,
                         "--shard", "7", "--max-age", "7d")  # fmt: skip
    assert code == 0, err
    assert out.startswith(f"{LOG} shard 7: removed 1 event(s); horizon ")
    assert "kept 1 more for consumer 'landing'" in out and "--override-consumers" in out
    # status lists the registered consumer's lag.
    code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG, "--json")
    lag = [c for c in json.loads(out)["consumers"] if c["shard"] == 7]
    assert [(c["consumer"], c["lag_events"], c["behind_retention"]) for c in lag] == [
        ("landing", 2, False)
    ]
    code, out, err = cli(capsys, "retention", "--connection", pg_uri, "--feed", LOG, "--shard",
                         "7", "--max-age", "7d", "--override-consumers", "--json")  # fmt: skip
    assert code == 0, err
    assert [(r["shard"], r["removed"], r["held_for_consumers"]) for r in json.loads(out)] == [
        (7, 1, 0)
    ]
    # The consumer is now behind retention: flagged, and its reads fail.
    code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG)
    assert f"BEHIND RETENTION: landing on {LOG} shard 7" in out and "Re-snapshot" in out
    code, out, _err = cli(capsys, "status", "--connection", pg_uri, "--feed", LOG,
                          "--format", "prometheus")  # fmt: skip
    behind = parse(out)["changefeed_consumer_behind_retention"]
    assert behind.value(consumer="landing", shard="7") == 1
    assert parse(out)["changefeed_retention_horizon_timestamp_seconds"].value(shard="7") > 0
    from changefeed.client import FellBehindRetention

    with pytest.raises(FellBehindRetention, match="fell behind retention"):
        log.read_page(admin, 7, first)
    assert log.forget_consumer(admin, "landing") == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "retention needs a policy: --max-age"),
        (["--max-age", "7 weeks"], "--max-age '7 weeks' is not an age"),
        (["--keep-last", "-1"], "--keep-last must be 0 or more"),
    ],
)  # fmt: skip
def test_retention_errors_name_the_fix(
    feeds: None, pg_uri: str, args: list[str], fragment: str, capsys: Any
) -> None:
    code, _out, err = cli(capsys, "retention", "--connection", pg_uri, "--feed", LOG, *args)
    assert code == 1 and err.startswith("changefeed retention: error: ")
    assert fragment in err


def test_every_metric_is_documented() -> None:
    """docs/operations.md's metrics table lists exactly the metrics the command prints."""
    text = (REPO / "docs" / "operations.md").read_text()
    documented = re.findall(r"^\| `(changefeed_[a-z_]+)`", text, flags=re.MULTILINE)
    assert documented == list(METRICS)
