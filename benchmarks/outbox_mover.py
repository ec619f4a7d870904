"""Benchmark of the outbox mover (``move_outbox``, protocol section 5) as its backlog grows.

The mover orders a shard's transactions by each one's largest ``order_sequence`` (O8) and
finds them in a window of the first ``max_rows`` outbox rows through the outbox's
``(shard_id, txid)`` index, so one call must cost the same whatever the backlog behind
its window. One run, on a fresh embedded PostgreSQL of its own, fills the outbox of one
feed with backlogs of 100,000 and 1,000,000 rows (one row per source transaction; the
rows are inserted directly, with distinct ``txid`` values, as committed writers would
have left them) and times:

* the first ``move_outbox(shard, 10000)`` call on each backlog, and the drain of the
  whole backlog in such calls (events per second): the ratio 1M / 100k must stay near 1;
* a backlog whose first transaction is long and interleaved with the others (its first
  row first, its last row last), where the window doubles until it holds a whole
  transaction.

Prints a markdown table and writes it into the "Outbox mover" section of
docs/performance.md (``--no-write`` to skip). Timing is never asserted in the tests.

    .venv/bin/python benchmarks/outbox_mover.py [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from _perfdoc import write_section
from _scratch import scratch_dir

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN outbox-mover (written by benchmarks/outbox_mover.py) -->"
END = "<!-- END outbox-mover -->"
DBT_PROJECT = REPO / "tests" / "pg_faults" / "dbt"  # the package and no models
MAX_ROWS = 10_000


def fill(admin: Any, outbox: str, rows: int, interleaved: bool) -> None:
    """``rows`` outbox rows of shard 0, one per transaction; ``interleaved``: the first and
    the last row belong to one transaction."""
    admin.execute(f"truncate {outbox}")
    admin.execute(
        f"insert into {outbox} (shard_id, txid, id) "
        "select 0, (1000 + i)::text::xid8, i from generate_series(1, %s) as i",
        (rows,),
    )
    if interleaved:
        admin.execute(f"update {outbox} set txid = '1001'::xid8 where id = %s", (rows,))
    admin.execute(f"analyze {outbox}")


def measure(admin: Any, feed: Any, outbox: str, rows: int, interleaved: bool) -> dict[str, float]:
    fill(admin, outbox, rows, interleaved)
    started = time.perf_counter()
    first = feed.move_outbox(admin, 0, MAX_ROWS)
    first_ms = 1000 * (time.perf_counter() - started)
    moved, started = first, time.perf_counter()
    while step := feed.move_outbox(admin, 0, MAX_ROWS):
        moved += step
    assert moved == rows, (moved, rows)
    rest = time.perf_counter() - started
    return {"first_ms": first_ms, "first": first, "rate": (moved - first) / rest if rest else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/")
    args = parser.parse_args(argv)

    import psycopg

    sys.path.insert(0, str(REPO))
    from tests.support.dbt_harness import DbtHarness

    from changefeed.client import PostgresFeed
    from changefeed.local.embedded_postgres import start

    workdir = scratch_dir("cf-mover-bench-")
    server = start(workdir / "pg")
    admin = psycopg.connect(server.uri, autocommit=True)
    admin.execute("create schema bench; create table bench.src (id bigint primary key)")
    dbt = DbtHarness(workdir / "dbt", postgres_uri=lambda: server.uri, project_dir=DBT_PROJECT)
    dbt.run_operation(
        "changefeed.setup_feed",
        {"relation": {"schema": "bench", "table": "src"}, "mode": "outbox"},
        target="postgres",
    )
    outbox = 'changefeed."outbox:bench.src"'
    feed = PostgresFeed("bench.src")
    results = {
        (rows, interleaved): measure(admin, feed, outbox, rows, interleaved)
        for rows in (100_000, 1_000_000)
        for interleaved in (False, True)
    }  # fmt: skip
    lines = [
        f"`move_outbox(shard, {MAX_ROWS:,})` on one shard, one row per source transaction; "
        "fresh embedded PostgreSQL 16 of the run.",
        "",
        "| backlog | first row's transaction | first call: rows | first call: ms "
        "| drain of the rest: events/s |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for (rows, interleaved), r in results.items():
        kind = "also holds the last row" if interleaved else "its own"
        lines.append(
            f"| {rows:,} | {kind} | {r['first']:,} | {r['first_ms']:,.1f} | {r['rate']:,.0f} |"
        )
    plain_small, plain_large = results[(100_000, False)], results[(1_000_000, False)]
    lines += [
        "",
        f"1M / 100k backlog: first call {plain_large['first_ms'] / plain_small['first_ms']:.2f}x "
        f"the time, drain {plain_small['rate'] / plain_large['rate']:.2f}x the time per event.",
        "",
        "A call reads a window of the first `max_rows` outbox rows and, through the "
        "`(shard_id, txid)` index, the rows of the transactions in it: its cost follows "
        "`max_rows`, not the backlog (a mover that read the whole backlog would take about "
        "10x the time at 1M). A long transaction interleaved with the others is taken once "
        "the doubling window holds it whole.",
    ]
    section = "\n".join(lines)
    print(section)
    if not args.no_write:
        write_section(DOC, BEGIN, END, "### Outbox mover\n\n" + section)
    admin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
