"""Benchmark: one landing service for many feeds against one ``changefeed land`` process
per feed, side by side in one run.

On the embedded PostgreSQL 16, ``--feeds`` blocking feeds with payload (default 50) get
``--rate`` events/s in all (default 1,000, spread evenly): one writer thread per feed,
transactions of 10 events at a steady pace, each transaction's commit time noted (wall
clock, after COMMIT returned). Two ways of landing them, one after the other:

* **service**: one :class:`LandingService` of every feed (``--interval 1 --poll 0.2``,
  its default 8 workers) in one local[2] Spark session with a Derby metastore, what
  ``changefeed land --feed 'bench.*' --continuous`` starts; a batch's commit time is when
  its run reported it;
* **processes**: ``--processes`` feeds (default 5; fifty JVMs of 1 GB and more do not fit
  a 2-core machine with 24 GB) each landed by a ``changefeed land --continuous --interval 1
  --poll 0.2`` process of its own (own warehouse and Derby metastore); a batch's commit
  time is when its line arrived on the process's stdout.

Each event's latency is its batch's commit time minus its transaction's commit time,
events of the first 10 s of writes left out (warm-up). Memory is the resident set of each
landing's process tree (Python, the JVM, Spark's Python workers), sampled every second,
and CPU the tree's CPU-seconds during the writes; per feed, the service's divided by its
feeds. Prints a markdown section and, with ``--write-docs``, puts it into
docs/performance.md. Usage::

    .venv/bin/python benchmarks/landing_service.py [--feeds 50] [--rate 1000]
        [--seconds 60] [--processes 5] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _perfdoc import write_section
from _scratch import scratch_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/support/dbt_harness.py runs the dbt macros in-process

DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN landing-service (written by benchmarks/landing_service.py) -->"
END = "<!-- END landing-service -->"
PER_TX = 10
WARMUP = 10.0
INTERVAL, POLL = 1.0, 0.2
BARS = {"p50": 2.0, "p99": 5.0}  # seconds, every feed of the service (issue 30)


@dataclass
class Mode:
    name: str
    feeds: list[str]
    commits: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # key, time
    landed: dict[str, dict[int, float]] = field(default_factory=dict)  # feed: batch -> time
    rss: list[float] = field(default_factory=list)  # bytes, per sample
    cpu_seconds: float = 0.0
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)


def writer(uri: str, feed: str, rate: float, seconds: float, out: list[tuple[int, float]],
           stop: threading.Event) -> None:  # fmt: skip
    """Transactions of PER_TX events on shard 0 at ``rate`` events/s for ``seconds``."""
    import psycopg

    from changefeed.client import PostgresFeed

    client = PostgresFeed(feed)
    schema, table = feed.split(".")
    conn = psycopg.connect(uri, autocommit=True)
    step = PER_TX / rate
    next_at = time.monotonic() + step * (hash(feed) % 100) / 100  # spread the feeds' starts
    deadline, key = time.monotonic() + seconds, 1 + max((k for k, _ in out), default=0)
    while next_at < deadline and not stop.is_set():
        time.sleep(max(0.0, next_at - time.monotonic()))
        with client.write(conn, 0) as w:
            conn.execute(
                f'insert into "{schema}"."{table}" (id, v) select g, \'v\' || g '
                "from generate_series(%s::bigint, %s::bigint) g",
                (key, key + PER_TX - 1),
            )
            conn.execute(
                f"insert into {w.feed_table} (shard_id, ulid, id) select 0, {w.ulid_sql}, g "
                "from generate_series(%s::bigint, %s::bigint) g order by g",
                (key, key + PER_TX - 1),
            )
        out.append((key + PER_TX - 1, time.time()))
        key += PER_TX
        next_at = max(next_at + step, time.monotonic() - 1.0)
    conn.close()


class Sampler:
    """Resident set size and CPU-seconds of process trees, sampled every second."""

    def __init__(self, roots: list[int]) -> None:
        import psutil

        self.roots = [psutil.Process(pid) for pid in roots]
        self.rss: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def trees(self) -> list[Any]:
        """The roots and their descendants, but for the embedded PostgreSQL (a child of
        this process, and the source, not the landing)."""
        import psutil

        found = []
        for root in self.roots:
            try:
                found += [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
        kept = []
        for proc in found:
            try:
                if proc.name() != "postgres":
                    kept.append(proc)
            except psutil.Error:
                continue
        return kept

    def cpu(self) -> float:
        import psutil

        total = 0.0
        for proc in self.trees():
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
        return total

    def _run(self) -> None:
        import psutil

        while not self.stop.wait(1.0):
            total = 0
            for proc in self.trees():
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.rss.append(total)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def write_all(uri: str, mode: Mode, rate: float, seconds: float) -> None:
    """Every feed's writer thread, in a process of its own: in the landing's process they
    would compete for its interpreter (the service's workers are threads too), and their
    CPU would count as the landing's."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        commits = pool.apply(_write_all, (uri, mode.feeds, rate, seconds))
    mode.commits.update(commits)


def _write_all(uri: str, feeds: list[str], rate: float, seconds: float
               ) -> dict[str, list[tuple[int, float]]]:  # fmt: skip
    sys.path.insert(0, str(REPO / "python"))
    stop = threading.Event()
    commits: dict[str, list[tuple[int, float]]] = {feed: [] for feed in feeds}
    threads = [
        threading.Thread(target=writer, args=(uri, feed, rate, seconds, commits[feed], stop),
                         daemon=True)
        for feed in feeds
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return commits


def latencies(mode: Mode, batch_ends: dict[str, list[tuple[int, int]]], started: float) -> None:
    """Per feed, each event's latency: its batch's commit minus its transaction's commit
    (``batch_ends``: per feed, (batch, its highest key) in order)."""
    for feed, commits in mode.commits.items():
        ends = sorted(batch_ends.get(feed, []), key=lambda b: b[1])
        values = []
        for last_key, committed in commits:
            if committed < started + WARMUP:
                continue
            batch = next(b for b, top in ends if top >= last_key)
            values.extend([mode.landed[feed][batch] - committed] * PER_TX)
        mode.latencies[feed] = sorted(values)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def run_service(spark: Any, uri: str, mode: Mode, rate: float, seconds: float) -> None:
    from changefeed.spark.landing import LandingService, resolve_targets

    targets = resolve_targets({"connection": uri, "payload": "true"}, mode.feeds,
                              "bench.{table}_service")  # fmt: skip
    lock = threading.Lock()

    def on_result(target: Any, result: Any) -> None:
        if result.batch is not None:
            with lock:
                mode.landed.setdefault(target.feed, {})[result.batch] = time.time()

    service = LandingService(spark, targets, interval=INTERVAL, poll=POLL, on_result=on_result)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    # Every feed's first run (it reads the table and creates it) before the writes start.
    while any(s.runs == 0 for s in service.status()):
        time.sleep(0.5)
    with Sampler([os.getpid()]) as sampler:
        cpu0, started = sampler.cpu(), time.time()
        write_all(uri, mode, rate, seconds)
        wait_landed(mode)
        mode.cpu_seconds, mode.seconds = sampler.cpu() - cpu0, time.time() - started
    mode.rss = sampler.rss
    stop.set()
    thread.join()
    service.close()
    ends = {feed: batch_ends(spark, f"bench.{feed.split('.')[1]}_service") for feed in mode.feeds}
    latencies(mode, ends, started)


def wait_landed(mode: Mode, quiet: float = 5.0) -> None:
    """Until no feed has landed a batch for ``quiet`` seconds after the writes ended (a
    landing looks every 0.2 s, so each has then landed everything)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        newest = max((t for batches in mode.landed.values() for t in batches.values()),
                     default=0.0)  # fmt: skip
        if time.time() - newest > quiet:
            return
        time.sleep(0.5)
    raise SystemExit(f"{mode.name}: the landings were still busy 300 s after the writes")


def batch_ends(spark: Any, table: str) -> list[tuple[int, int]]:
    spark.catalog.refreshTable(table)
    rows = spark.sql(f"select changefeed_batch, max(id) from {table} group by 1").collect()
    return [(int(r[0]), int(r[1])) for r in rows]


def run_processes(uri: str, mode: Mode, rate: float, seconds: float, workdir: Path) -> None:
    procs: dict[str, subprocess.Popen[str]] = {}
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    for feed in mode.feeds:
        folder = workdir / f"proc-{feed.split('.')[1]}"
        folder.mkdir()
        procs[feed] = subprocess.Popen(
            [sys.executable, "-m", "changefeed.cli", "land", "--connection", uri, "--feed",
             feed, "--table", f"bench.{feed.split('.')[1]}_process", "--payload",
             "--continuous", "--interval", str(INTERVAL), "--poll", str(POLL), "--verbose",
             "--warehouse", str(folder / "wh")],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    first_run = {feed: threading.Event() for feed in mode.feeds}

    def read(feed: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            first_run[feed].set()
            found = line.split(": batch ", 1)
            if len(found) == 2:
                mode.landed.setdefault(feed, {})[int(found[1].split(",")[0])] = time.time()

    for feed, proc in procs.items():
        threading.Thread(target=read, args=(feed, proc), daemon=True).start()
    for event in first_run.values():
        event.wait(300)
    with Sampler([p.pid for p in procs.values()]) as sampler:
        cpu0, started = sampler.cpu(), time.time()
        write_all(uri, mode, rate, seconds)
        wait_landed(mode)
        mode.cpu_seconds, mode.seconds = sampler.cpu() - cpu0, time.time() - started
    mode.rss = sampler.rss
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        proc.wait(120)
    # Batch ends from the tables' files (each process had its own metastore).
    import pyarrow.dataset as ds

    ends = {}
    for feed in mode.feeds:
        name = feed.split(".")[1]
        location = workdir / f"proc-{name}" / "wh" / "bench.db" / f"{name}_process"
        table = ds.dataset(location, format="parquet", partitioning="hive").to_table()
        by_batch: dict[int, int] = {}
        for batch, key in zip(table["changefeed_batch"].to_pylist(), table["id"].to_pylist(),
                              strict=True):  # fmt: skip
            by_batch[batch] = max(by_batch.get(batch, 0), key)
        ends[feed] = sorted(by_batch.items())
    latencies(mode, ends, started)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--feeds", type=int, default=50)
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s, all feeds")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    from tests.support import spark_source as kit
    from tests.support.dbt_harness import DbtHarness

    from changefeed.local.embedded_postgres import start
    from changefeed.local.spark import local_spark_session

    workdir = scratch_dir("cf-bench-service-")
    pg = start(workdir / "pg")
    dbt = DbtHarness(workdir / "dbt", postgres_uri=lambda: pg.uri,
                     project_dir=REPO / "tests" / "pg_faults" / "dbt")  # fmt: skip
    per_feed = args.rate / args.feeds
    feeds = [
        kit.create_feed(dbt, pg.uri, "blocking", "id bigint primary key, v text", schema="bench")
        for _ in range(args.feeds + args.processes)
    ]
    print(f"{len(feeds)} feeds set up; {per_feed:g} events/s each", flush=True)
    loads = [os.getloadavg()]

    spark = local_spark_session("changefeed-bench-service", warehouse_dir=workdir / "wh",
                                hive=True)  # fmt: skip
    service = Mode("service", feeds[: args.feeds])
    run_service(spark, pg.uri, service, per_feed, args.seconds)
    report("service", service)
    loads.append(os.getloadavg())
    spark.stop()

    separate = Mode("processes", feeds[args.feeds :])
    run_processes(pg.uri, separate, per_feed, args.seconds, workdir)
    report("processes", separate)
    loads.append(os.getloadavg())

    section, missed = render(args, service, separate, loads)
    print()
    print(section)
    if args.write_docs:
        write_section(DOC, BEGIN, END, section)
        print(f"\nwritten to {DOC.relative_to(REPO)}")
    if missed:
        print("\nMISSED: " + "; ".join(missed))
    return 0


def report(name: str, mode: Mode) -> None:
    worst50 = max(percentile(v, 0.5) for v in mode.latencies.values())
    worst99 = max(percentile(v, 0.99) for v in mode.latencies.values())
    print(f"{name}: {len(mode.feeds)} feeds, worst feed p50 {worst50:.2f} s, p99 "
          f"{worst99:.2f} s; peak RSS {max(mode.rss) / 2**30:.2f} GiB; "
          f"{mode.cpu_seconds:.0f} CPU-s", flush=True)  # fmt: skip


def render(args: argparse.Namespace, service: Mode, separate: Mode,
           loads: list[tuple[float, ...]]) -> tuple[str, list[str]]:  # fmt: skip
    def fmt(load: tuple[float, ...]) -> str:
        return "/".join(f"{x:.1f}" for x in load)

    def row(mode: Mode, how: str) -> tuple[str, dict[str, float]]:
        p50s = [percentile(v, 0.5) for v in mode.latencies.values()]
        p99s = [percentile(v, 0.99) for v in mode.latencies.values()]
        feeds = len(mode.feeds)
        figures = {
            "p50_median": statistics.median(p50s), "p50_worst": max(p50s),
            "p99_median": statistics.median(p99s), "p99_worst": max(p99s),
            "rss_per_feed": max(mode.rss) / feeds / 2**20,
            "cpu_per_feed": mode.cpu_seconds / mode.seconds / feeds,
        }  # fmt: skip
        text = (
            f"| {how} | {feeds} | {figures['p50_median']:.2f} s / {figures['p50_worst']:.2f} s "
            f"| {figures['p99_median']:.2f} s / {figures['p99_worst']:.2f} s | "
            f"{max(mode.rss) / 2**30:.2f} GiB | {figures['rss_per_feed']:,.0f} MiB | "
            f"{mode.cpu_seconds / mode.seconds:.2f} | {figures['cpu_per_feed']:.3f} |"
        )
        return text, figures

    one, a = row(service, "one service (`--feed 'bench.*'`)")
    many, b = row(separate, "a `changefeed land` per feed")
    missed = [
        f"service {name} worst feed {a[key]:.2f} s (bar {BARS[name]:g} s)"
        for name, key in (("p50", "p50_worst"), ("p99", "p99_worst"))
        if a[key] > BARS[name]
    ]
    lines = [
        "## Landing many feeds: one service against a process per feed",
        "",
        f"`benchmarks/landing_service.py`: {args.rate:,.0f} events/s in all, "
        f"{args.rate / args.feeds:g} per feed, for {args.seconds:g} s into blocking feeds "
        f"with payload (one writer thread per feed, transactions of {PER_TX} events) on the "
        f"embedded PostgreSQL 16; landed continuously (`--interval {INTERVAL:g} --poll "
        f"{POLL:g}`) into parquet tables, first by one service of {args.feeds} feeds in a "
        f"local[2] Spark session, then {args.processes} feeds at the same rate each by a "
        f"`changefeed land` process of its own (fifty JVMs do not fit this machine). "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"1/5/15 min: {fmt(loads[0])} before, {fmt(loads[1])} between, {fmt(loads[2])} at "
        f"the end). Latency: from each transaction's commit to its batch's commit, events "
        f"of the first {WARMUP:g} s left out; per feed, then the median feed and the worst. "
        f"Memory: the peak resident set of the landings' process trees (Python, JVM, "
        f"Spark's Python workers); CPU: cores busy during the writes.",
        "",
        "| landing | feeds | p50, median feed / worst | p99, median feed / worst | peak "
        "memory | memory per feed | cores busy | cores busy per feed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        one,
        many,
        "",
        f"Per feed, one service takes {a['rss_per_feed'] / b['rss_per_feed']:.2f}x the "
        f"memory and {a['cpu_per_feed'] / b['cpu_per_feed']:.2f}x the CPU of a process per "
        f"feed. Bars (issue 30: every feed of the service p50 ≤ {BARS['p50']:g} s and p99 ≤ "
        f"{BARS['p99']:g} s): "
        + ("**met**." if not missed else "**missed** (" + "; ".join(missed) + ")."),
    ]
    return "\n".join(lines), missed


if __name__ == "__main__":
    sys.exit(main())
