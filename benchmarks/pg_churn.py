"""Benchmark: the safe point's cost and the session table's size under connection churn.

A session row is keyed by the writer's backend PID, so every connection that writes
leaves one; a lock call that finds 8 or more finished rows of other connections on its
shard deletes those whose backend has exited
(docs/postgres.md, "Cleaning the session table"). On a fresh embedded PostgreSQL 16 and
a blocking feed, this measures ``safe_point:<feed>`` (server execution time by EXPLAIN
ANALYZE, median of 60, and the client call with its round trip, median of 200) on the
idle feed after one write, then after each of ``--steps`` (default 1,000, 2,500 and
5,000) short-lived writer connections in total, each connecting, writing one event and
disconnecting (``--threads`` at a time, default 4), with the session table's row count
at each step.

Prints a markdown section and, with ``--write-docs``, puts it into docs/performance.md
after the PostgreSQL feeds section. ``--check`` exits 1 if the safe point after the churn
costs over 1.5x its idle time or the session table holds over 64 rows. Usage::

    .venv/bin/python benchmarks/pg_churn.py [--steps 1000,2500,5000] [--threads 4]
        [--write-docs] [--check]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
from pathlib import Path

from _perfdoc import write_section
from _scratch import scratch_dir
from pg_feed import Bench

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN pg-churn (written by benchmarks/pg_churn.py) -->"
END = "<!-- END pg-churn -->"
BARS = {"growth": 1.5, "session_rows": 64}


def churn(uri: str, feed_id: str, keys: range, threads: int) -> None:
    """One connection per key: connect, write the key as one event on shard 0, close."""
    import psycopg

    from changefeed.client import PostgresFeed

    feed = PostgresFeed(feed_id)
    todo = iter(keys)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                key = next(todo, None)
            if key is None:
                return
            try:
                with psycopg.connect(uri, autocommit=True) as conn, feed.write(conn, 0) as w:
                    w.insert_events([(key,)])
            except BaseException as exc:
                errors.append(exc)
                return

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", default="1000,2500,5000",
                        help="total writer connections after each step")  # fmt: skip
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 if a bar is missed")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]

    import psycopg

    from changefeed.client import PostgresFeed
    from changefeed.local.embedded_postgres import start

    workdir = scratch_dir("cf-pg-churn-")
    server = start(workdir / "pg")
    bench = Bench(server.uri, workdir / "dbt")
    feed_id = bench.feed(bench.table("bench", "churn_src"), "blocking")
    conn = psycopg.connect(server.uri, autocommit=True)
    info = PostgresFeed(feed_id).info(conn)
    statement = f"select * from {info.q('safe_point')}(0)"
    count_sql = f"select count(*) from {info.q('session')}"
    load_before = os.getloadavg()[0]

    def measure(connections: int) -> tuple[int, int, float, float]:
        row = bench.admin.execute(count_sql).fetchone()
        assert row is not None
        server_ms = bench.server_ms(statement)
        client_ms = bench.client_ms(lambda: conn.execute(statement).fetchall())
        print(f"{connections:>6} writer connections: {row[0]} session rows, safe point "
              f"server {server_ms:.3f} ms, call {client_ms:.3f} ms", flush=True)  # fmt: skip
        return connections, int(row[0]), server_ms, client_ms

    churn(server.uri, feed_id, range(1), 1)
    rows = [measure(1)]
    done = 1
    for total in steps:
        churn(server.uri, feed_id, range(done, total), args.threads)
        done = total
        rows.append(measure(total))
    point = PostgresFeed(feed_id).safe_point(conn, 0)
    assert point.pending == 0 and point.safe_point == point.head
    load_after = os.getloadavg()[0]

    idle, last = rows[0], rows[-1]
    growth = last[2] / idle[2]
    most_rows = max(r[1] for r in rows)
    missed = []
    if growth > BARS["growth"]:
        missed.append(f"safe point {growth:.2f}x its idle time (bar {BARS['growth']}x)")
    if most_rows > BARS["session_rows"]:
        missed.append(f"{most_rows} session rows (bar {BARS['session_rows']})")
    lines = [
        "### Safe point under connection churn",
        "",
        f"`benchmarks/pg_churn.py` ({platform.machine()}, {os.cpu_count()} cores shared with "
        f"other jobs, load average {load_before:.1f} before, {load_after:.1f} after): a "
        f"blocking feed on a fresh embedded PostgreSQL; each writer connection connects, "
        f"writes one event on shard 0 and disconnects, {args.threads} at a time. "
        f"`safe_point(0)`: server time median of 60 EXPLAIN ANALYZE runs, call time "
        f"(with its round trip) median of 200.",
        "",
        "| writer connections so far | session rows | safe point, server ms | call ms |",
        "| ---: | ---: | ---: | ---: |",
        *[f"| {n:,} | {r} | {s:.3f} | {c:.3f} |" for n, r, s, c in rows],
        "",
        f"After {last[0]:,} connections the safe point costs {growth:.2f}x its idle time "
        f"and the session table holds at most {most_rows} rows (a lock call that finds 8 "
        f"finished rows of other connections on its shard deletes those of exited "
        f"backends): bars (≤ {BARS['growth']}x, ≤ "
        f"{BARS['session_rows']} rows) "
        + ("**met**." if not missed else "**missed**: " + "; ".join(missed) + "."),
    ]
    section = "\n".join(lines)
    print()
    print(section)
    if args.write_docs:
        write_section(DOC, BEGIN, END, section)
        print(f"\nwritten to {DOC.relative_to(REPO)}")
    conn.close()
    bench.admin.close()
    if missed:
        print("\nMISSED: " + "; ".join(missed))
        return 1 if args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
