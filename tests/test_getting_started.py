"""docs/getting-started.md, followed as a new user would: two dbt projects in a temporary
folder outside this repository, built from the page's own blocks, its commands run as
written in terminals whose environment is cleared of everything the page does not set
(the page's env.sh sourced in each), twice, with new writes in between; then every event
is in the consumer exactly once and the current-state model equals the application's
table.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support.doc_blocks import sample
from tests.support.spark_source import feed_rows

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]

#: Reads the two models through the shared catalog (SPARK_CONF_DIR), as JSON.
DUMP = """
import json
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
def rows(sql):
    return [[v.hex() if isinstance(v, (bytes, bytearray)) else (str(v) if v is not None and
             not isinstance(v, (int, bool, str)) else v) for v in r]
            for r in spark.sql(sql).collect()]
print(json.dumps({
    "events": rows("select shard_id, ulid, order_id, status, amount from analytics.order_events"),
    "current": rows("select order_id, payload.status, payload.amount, changefeed_deleted "
                    "from analytics.orders_current"),
    "live": rows("select order_id, payload.status, payload.amount from analytics.orders_live"),
    "history": rows("select order_id, payload.status, changefeed_deleted, valid_from, valid_to, "
                    "changefeed_operation from iceberg.analytics.orders_history "
                    "order by order_id, valid_from, ulid"),
    "history_format": rows("show tblproperties iceberg.analytics.orders_history "
                           "('format-version')"),
}))
"""


def file_of(block: str) -> tuple[str, str]:
    """A block whose first line is ``# dir/file`` or ``-- dir/file``: that path and the text."""
    first = block.splitlines()[0]
    found = re.match(r"^(?:#|--) (\S+)", first)
    assert found, first
    return found.group(1), block


def write_file(root: Path, block: str) -> None:
    path, text = file_of(block)
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def shell(root: Path, text: str, env: dict[str, str]) -> str:
    return shell_run(root, text, env).stdout


def shell_run(root: Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``text`` in a new terminal in ``root``: bash with ``env`` (the cleared environment)
    and the page's ``env.sh`` sourced first, as the page tells the reader to."""
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", f". ./env.sh\n{text}"], cwd=root, env=env,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, f"{text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def terminal_environment() -> dict[str, str]:
    """A new terminal's environment: the system's PATH, HOME and a locale, and nothing
    the page does not set. Three settings of the test machine stay, none of which the
    page's commands need: JAVA_HOME where the machine sets it, the test JVMs' options
    (SPARK_SUBMIT_OPTS: speed only, docs/testing.md) and dbt's usage statistics off (no
    network here)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}  # fmt: skip
    for name in ("JAVA_HOME", "SPARK_SUBMIT_OPTS"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def env_file(shop: str) -> str:
    """The page's env.sh with this server's values: its socket directory for localhost,
    and the database's URI (the socket's form of it)."""
    text = sample("getting-started-env")
    socket_dir = re.search(r"host=([^&]+)", shop)
    assert socket_dir
    lines = text.splitlines()
    assert lines[1] == ". changefeed/.venv/bin/activate", lines
    host = "export PGHOST=localhost PGPORT=5432 PGUSER=postgres PGPASSWORD=postgres"
    uri = "export CHANGEFEED_CONNECTION=postgresql://postgres:postgres@localhost:5432/shop"
    assert lines[2:4] == [host, uri], lines
    lines[2] = host.replace("localhost", socket_dir.group(1))
    lines[3] = f"export CHANGEFEED_CONNECTION='{shop}'"
    return "\n".join(lines) + "\n"


def assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    """A clean run prints no Java stack trace and no routine warning (issue 33): on the
    shared catalog only the JVM's own line about its incubator modules remains."""
    noise = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.startswith("\tat ") or " WARN " in line or " ERROR " in line
        or "log4j" in line or "Exception" in line
    ]  # fmt: skip
    assert not noise, "\n".join(noise[:20])


def _a_terminal_without_spark_conf_dir(root: Path, env: dict[str, str], conf_dir: Path) -> None:
    """A new terminal that missed env.sh's SPARK_CONF_DIR (issue 33): `dbt run` fails at
    once in dbt's four lines, the last naming the export, before Spark starts, so no
    Derby metastore_db/ is left behind."""
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", ". ./env.sh\nunset SPARK_CONF_DIR\ncd shop_analytics\ndbt run"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    seconds = time.monotonic() - started
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 2, lines
    last = lines[-1].strip()
    assert last.startswith("changefeed: SPARK_CONF_DIR is not set"), lines
    assert f"export SPARK_CONF_DIR={conf_dir} " in last, last
    assert len(lines) <= 5, lines
    assert not (root / "metastore_db").exists()
    assert not (root / "shop_analytics" / "metastore_db").exists()
    assert seconds < 15, seconds


@pytest.fixture(scope="module")
def shop(pg_server: Any, pg_uri: str) -> str:
    """The URI of the page's database ``shop`` on the embedded server, which the page's
    own block creates (a database of an earlier run is dropped first)."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("drop database if exists shop with (force)")
    return re.sub(r"/postgres\?", "/shop?", pg_uri, count=1)


def test_install_names_the_make_targets_and_the_venv() -> None:
    """The install block is not run here (make test has just done it): its targets exist
    and the venv it activates is the one make creates."""
    text = sample("getting-started-install")
    assert text.splitlines() == ["make -C changefeed venv jars", ". changefeed/.venv/bin/activate"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^venv: ", makefile, re.M) and re.search(r"^jars: ", makefile, re.M)
    assert re.search(r"^VENV \?= \.venv$", makefile, re.M)


@pytest.mark.timeout(1800)  # six Spark processes one after the other (about 3 min quiet)
def test_the_page_end_to_end_twice(
    shop: str, pg_uri: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("getting-started")
    assert REPO not in root.parents  # outside the repository, as a user's projects are
    (root / "changefeed").symlink_to(REPO)
    env = terminal_environment()
    write_file(root, env_file(shop))

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sample("getting-started-database"))
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(sample("getting-started-table"))
    for block in (
        sample("getting-started-pg-profiles"),
        sample("getting-started-pg-project"),
        sample("getting-started-spark-profiles"),
        sample("getting-started-spark-project"),
        sample("getting-started-sources"),
        sample("getting-started-events"),
        sample("getting-started-current"),
        sample("getting-started-live"),
        sample("getting-started-history"),
        sample("getting-started-schema-macro"),
    ):
        write_file(root, block)
    packages = sample("getting-started-packages")
    for project in ("shop_feeds", "shop_analytics"):
        (root / project / "packages.yml").write_text(packages)
    layout = sample("getting-started-layout")
    for line in layout.splitlines()[1:]:
        name = line.split()[0]
        assert (root / name).is_dir() if name.endswith("/") else (root / name).is_file(), line

    shell(root, sample("getting-started-setup"), env)
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(sample("getting-started-writes"))

    catalog = shell(root, sample("getting-started-catalog"), env)
    # The catalog the page's env.sh names is the one the command set up.
    conf_dir = root / ".changefeed" / "catalog" / "conf"
    assert f"export SPARK_CONF_DIR={conf_dir}" in catalog, catalog
    assert "export SPARK_CONF_DIR=$PWD/.changefeed/catalog/conf" in sample("getting-started-env")
    try:
        landed = shell(root, sample("getting-started-land"), env)
        assert "landing.shop_orders: batch 1, 3 events" in landed, landed
        assert_quiet(shell_run(root, sample("getting-started-run"), env))
        _a_terminal_without_spark_conf_dir(root, env, conf_dir)

        # More writes, a delete among them: land again, run again.
        with psycopg.connect(shop, autocommit=True) as conn:
            conn.execute("insert into shop.orders values (3, 'new', 7.25)")
            conn.execute("update shop.orders set status = 'shipped' where order_id = 1")
            conn.execute("delete from shop.orders where order_id = 2")
        landing = shell_run(root, sample("getting-started-land"), env)
        assert "landing.shop_orders: batch 2, 3 events" in landing.stdout, landing.stdout
        assert_quiet(landing)
        assert_quiet(shell_run(root, sample("getting-started-run"), env))
        dumped = shell(root, f"python - <<'EOF'\n{DUMP}\nEOF", env)
    finally:
        shell(root, "changefeed catalog stop --dir .changefeed/catalog", env)
    result = json.loads(dumped.strip().splitlines()[-1])

    events = [(r[0], r[1], r[2]) for r in result["events"]]
    assert Counter(events).most_common(1)[0][1] == 1  # no duplicates
    expected = [(s, u.hex(), k) for s, u, k in feed_rows(shop, "shop.orders")]
    assert sorted(events) == sorted(expected) and len(events) == 6
    with psycopg.connect(shop) as conn:
        source = conn.execute("select order_id, status, amount::text from shop.orders").fetchall()
    current = {r[0]: r for r in result["current"]}
    assert sorted((k, r[1], r[2]) for k, r in current.items() if not r[3]) == sorted(source)
    assert current[2][3] is True  # the deleted order

    # Without tombstones: exactly the application's rows.
    live = [tuple(r) for r in result["live"]]
    assert len(live) == len(source) and sorted(live) == sorted(source)

    # The Iceberg history, from the same project and run: per order and landing a
    # version, each ending where the next begins; order 2's last version is its delete.
    versions: dict[int, list[list[Any]]] = {}
    for order_id, *rest in result["history"]:
        versions.setdefault(order_id, []).append(rest)
    assert {k: [(v[0], v[1], v[4]) for v in vs] for k, vs in versions.items()} == {
        1: [("paid", False, "insert"), ("shipped", False, "update")],
        2: [("new", False, "insert"), (None, True, "delete")],
        3: [("new", False, "insert")],
    }
    for chain in versions.values():
        assert [v[3] for v in chain[:-1]] == [v[2] for v in chain[1:]] and chain[-1][3] is None
    assert result["history_format"][0][1] == "2", "an Iceberg table (format version 2)"
