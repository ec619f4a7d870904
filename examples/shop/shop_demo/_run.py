"""The demo's orchestration: PostgreSQL, dbt-postgres, load, landing, dbt-spark, check."""

from __future__ import annotations

import json
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from changefeed.local.embedded_postgres import import_pgserver
from shop_demo._chart import Series, line_chart, report_html
from shop_demo._check import CheckResult, run_check
from shop_demo._dbt import DbtProject, postgres_output, spark_session_output
from shop_demo._errors import DemoError
from shop_demo._landing import INTERVAL, POLL, FeedLanding, LandedBatch, event_latencies, percentile
from shop_demo._layout import ANALYTICS_SCHEMA, EXAMPLE_DIR, FEEDS, DemoLayout
from shop_demo._load import LoadGenerator
from shop_demo._progress import Progress


@dataclass(frozen=True)
class DemoOptions:
    state_dir: Path
    duration: float = 60.0
    rate: float = 40.0
    writers: int = 6
    shards: int = 4
    cycle: float = 15.0
    seed: int | None = None
    reset: bool = False


@dataclass
class Metrics:
    """What the run measured, for the summary and the chart (times: s since load start)."""

    started_wall: float = 0.0
    started: float = 0.0
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    landings: list[LandedBatch] = field(default_factory=list)
    #: feed -> batch -> the committed -> landed latency (s) of each of its events
    latencies: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    dbt_runs: list[dict[str, Any]] = field(default_factory=list)

    def at(self) -> float:
        # Before the load (a backlog the landings land on their first run): its start.
        return time.monotonic() - self.started if self.started else 0.0


def start_postgres(layout: DemoLayout) -> tuple[str, Any]:
    """The demo's embedded server: data in ``<state>/pg``, stopped when the demo exits."""
    layout.pg_dir.mkdir(parents=True, exist_ok=True)
    try:
        pgserver = import_pgserver()
    except ImportError:
        raise DemoError(
            "pgserver is not installed, so there is no embedded PostgreSQL: run `make demo` "
            "(it installs everything into .venv) or `pip install -e '.[postgres,dev]'`"
        ) from None
    try:
        handle = pgserver.get_server(str(layout.pg_dir), cleanup_mode="stop")
    except Exception as exc:
        raise DemoError(
            f"the embedded PostgreSQL in {layout.pg_dir} did not start ({exc}); see "
            f"{layout.pg_dir / 'log'}, or delete {layout.root} to start over"
        ) from exc
    return str(handle.get_uri()), handle


class Demo:
    def __init__(self, options: DemoOptions, progress: Progress | None = None) -> None:
        self.options = options
        self.layout = DemoLayout(options.state_dir)
        self.progress = progress or Progress()
        self.metrics = Metrics()
        self.history: list[dict[str, Any]] = []
        self.run_number = 1
        self.interrupted_before = False
        self.load_seconds = 0.0
        self.spark: Any = None
        self.uri = ""
        self.landed_before: dict[str, tuple[int, int]] = {}
        self.consumed_before: dict[str, int] = {}
        self.consumed_now: dict[str, int] = {}
        self.landed_now: dict[str, int] = {}
        self.batches: dict[str, list[int]] = {feed: [] for feed in FEEDS}
        self.landings: dict[str, FeedLanding] = {}
        self._landed_lock = threading.Lock()

    # -- the run -----------------------------------------------------------------------

    def run(self) -> int:
        # Deprecation notes from inside pyspark are not the user's business here.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\.")
        say = self.progress.say
        layout = self.layout
        if self.options.reset and layout.root.exists():
            shutil.rmtree(layout.root)
            say(f"--reset: deleted {layout.root}")
        layout.root.mkdir(parents=True, exist_ok=True)
        recorded = json.loads(layout.runs_file.read_text()) if layout.runs_file.exists() else []
        # A run that was interrupted left a "running" entry: its number is used again, and
        # the totals of the last finished run no longer describe the tables.
        self.interrupted_before = bool(recorded) and recorded[-1].get("status") == "running"
        self.history = [h for h in recorded if h.get("status") != "running"]
        self.run_number = len(self.history) + 1
        if self.history:
            last = self.history[-1]
            say(
                f"changefeed demo, run {self.run_number}: continuing from run {last['run']} "
                f"({last['totals']['landed']:,} events landed so far; state in {layout.root}; "
                "--reset starts over)"
            )
        else:
            say(f"changefeed demo, run 1 (state in {layout.root})")

        from shop_demo._spark import start_spark

        # Spark takes the longest to start: it starts in the background while PostgreSQL
        # and dbt-postgres set up, and the load already runs when it is ready.
        say(
            f"starting Spark in the background (local[2]; tables and metastore in "
            f"{layout.warehouse_dir}; log in {layout.log_dir / 'spark.log'})"
        )
        spark_started = time.monotonic()
        spark_job = _Background(lambda: start_spark(layout))
        with self.progress.step(
            f"starting the embedded PostgreSQL (data in {layout.pg_dir})", "PostgreSQL"
        ):
            self.uri, _handle = start_postgres(layout)
        with self.progress.step(
            "dbt-postgres: creating the shop tables and setting up feeds (examples/shop/oltp)",
            "dbt-postgres",
        ):
            oltp = DbtProject(
                EXAMPLE_DIR / "oltp",
                layout.dbt_dir / "oltp",
                "shop_oltp",
                postgres_output(self.uri, "public"),
            )
            for operation in ("create_shop_tables", "setup_shop_feeds"):
                oltp.invoke(["run-operation", operation], on_log=lambda m: say("  " + m))
        generator = LoadGenerator(
            self.uri,
            run=self.run_number,
            shards=self.options.shards,
            writers=self.options.writers,
            rate=self.options.rate,
            seed=self.options.seed,
        )
        generator.prepare()
        analytics = DbtProject(
            EXAMPLE_DIR / "analytics",
            layout.dbt_dir / "analytics",
            "shop_analytics",
            spark_session_output(ANALYTICS_SCHEMA),
        )

        self._mark_running()
        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(generator, sampler_stop), daemon=True)
        timer = threading.Timer(self.options.duration, generator.stop)
        timer.daemon = True
        interrupted = False
        try:
            self.progress.set_activity("starting Spark")
            self.spark = spark_job.result()
            say(f"Spark: ready after {time.monotonic() - spark_started:.1f} s")
            self.progress.set_activity("reading what earlier runs landed and consumed")
            self._baseline()
            # The load starts once both landings have done their first run (it reads the
            # table and starts Spark's Python workers), so every event's latency is the
            # continuous landing's, not the wait for Spark to start.
            self.progress.set_activity("starting the continuous landings")
            self._start_landings()
            with self.progress.step(
                "warm-up: landing one order and its payment before the load",
                "warm-up",
            ):
                # A Spark session's first batch write is its slowest: not a measured one.
                generator.warm_up()
                warmed = time.monotonic()
                for landing in self.landings.values():
                    landing.wait_for_a_run_started_after(warmed, timeout=300.0)
            say(
                f"landing continuously: each feed every {POLL:g} s looks for new events and "
                f"lands them, at most one batch per {INTERVAL:g} s "
                f"(changefeed land --continuous --interval {INTERVAL:g} --poll {POLL:g})"
            )
            say(
                f"load: {self.options.writers} writers, up to {self.options.rate:g} transactions/s "
                f"(fewer while long transactions hold shard locks) "
                f"on {self.options.shards} shards for {self.options.duration:g} s; dbt every "
                f"{self.options.cycle:g} s"
            )
            self.metrics.started = time.monotonic()
            self.metrics.started_wall = time.time()
            generator.start()
            sampler.start()
            # The load stops on time, whatever the dbt loop is doing.
            timer.start()
            self.progress.set_status(lambda: self._status_line(generator))
            # A cycle starts every `cycle` seconds from the start of the load.
            next_cycle = self.metrics.started + self.options.cycle
            while generator.running:
                self.progress.set_activity("landing continuously; waiting for the next dbt run")
                while generator.running and time.monotonic() < next_cycle:
                    time.sleep(0.2)
                if generator.running:
                    next_cycle = max(next_cycle + self.options.cycle, time.monotonic())
                    self._cycle(analytics)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            timer.cancel()
            self.progress.set_activity("stopping the writers (open transactions finish first)")
            generator.stop()
            load_seconds = min(self.metrics.at(), generator.stopped_at - self.metrics.started)
            self.load_seconds = load_seconds
            sampler_stop.set()
            if sampler.is_alive():
                sampler.join(2.0)
            if self.metrics.started:
                self._sample_once(generator)
            self.progress.set_status(None)
            self.progress.set_activity("")
        if interrupted:
            for landing in self.landings.values():
                landing.stop()
            say("interrupted: nothing is lost; `make demo` continues from here")
            return 130
        load = generator.stats.snapshot()
        say(
            f"load stopped after {load_seconds:.0f} s: {load['transactions']:,} transactions "
            f"({load['rolled_back']} rolled back, {load['long']} long, "
            f"{load['retried']} retried)"
        )
        if generator.stats.errors:
            say(
                f"writer errors ({len(generator.stats.errors)}), first: {generator.stats.errors[0]}"
            )

        with self.progress.step(
            "barrier on every shard: waiting until every committed transaction is readable",
            "barrier",
        ):
            self._barriers()
        barrier_done = time.monotonic()
        with self.progress.step(
            "final landing: a run of each landing that started after the barrier", "landing"
        ):
            for landing in self.landings.values():
                landing.wait_for_a_run_started_after(barrier_done, timeout=300.0)
            for landing in self.landings.values():
                landing.stop()
        with self.progress.step("final dbt run", "dbt"):
            self._cycle(analytics)
        self.progress.set_activity("measuring each event's committed -> landed latency")
        for feed, (_mode, table, key) in FEEDS.items():
            during_load = [b for b in self.landings[feed].batches
                           if b.committed_at >= self.metrics.started_wall]  # fmt: skip
            self.metrics.latencies[feed] = event_latencies(
                self.spark, table, key, during_load, generator.stats.commits[feed]
            )
        self.progress.set_activity("")
        with self.progress.step("exactly-once check (PostgreSQL audit tables vs Spark)", "check"):
            import psycopg

            with psycopg.connect(self.uri, autocommit=True) as pg:
                check = run_check(self.spark, pg)
        summary = self._summary(load, load_seconds, check, generator)
        self.progress.plain()
        for line in summary:
            self.progress.plain(line)
        self._save(load, load_seconds, check, summary)
        self.spark.stop()
        return 0 if check.passed else 1

    # -- pieces ------------------------------------------------------------------------

    def _baseline(self) -> None:
        """Where earlier runs stopped: from runs.json when the last run finished (fast),
        else (first run, or the last one was interrupted) from the Spark tables."""
        last = self.history[-1] if self.history else None
        if last is not None and not self.interrupted_before and "by_feed" in last:
            for feed in FEEDS:
                counts = last["by_feed"][feed]
                self.landed_before[feed] = (int(counts["landed"]), int(counts["batch"]))
                self.landed_now[feed] = int(counts["landed"])
                self.consumed_before[feed] = int(counts["consumed"])
            self.consumed_now = dict(self.consumed_before)
            return
        from shop_demo._spark import consumed_totals, feed_totals

        for feed, (_mode, table, _key) in FEEDS.items():
            self.landed_before[feed] = feed_totals(self.spark, table)
            self.landed_now[feed] = self.landed_before[feed][0]
        self.consumed_before = consumed_totals(self.spark)
        self.consumed_now = dict(self.consumed_before)

    def _start_landings(self) -> None:
        for feed, (_mode, table, _key) in FEEDS.items():
            landing = FeedLanding(self.spark, self.uri, feed, table, self.metrics.at,
                                  self._on_batch)  # fmt: skip
            self.landings[feed] = landing
            landing.start()
        for landing in self.landings.values():
            landing.wait_for_a_run_started_after(-float("inf"), timeout=300.0)

    def _on_batch(self, landed: LandedBatch) -> None:
        """Called by the landing threads for each batch they commit."""
        with self._landed_lock:
            self.batches[landed.feed].append(landed.batch)
            self.landed_now[landed.feed] += landed.events
            self.metrics.landings.append(landed)

    def _cycle(self, analytics: DbtProject) -> None:
        from shop_demo._spark import consumed_totals

        self.progress.set_activity(
            "dbt run (examples/shop/analytics: order_updates, "
            "payments_hourly, current_orders, revenue_per_hour)"
        )
        started = time.monotonic()
        started_wall = time.time()
        analytics.invoke(["run"])
        self.consumed_now = consumed_totals(self.spark)
        self.progress.say(
            f"dbt run: done in {time.monotonic() - started:.1f} s; landed so far: "
            + ", ".join(f"{feed} {n:,}" for feed, n in self.landed_now.items())
            + "; consumed so far: "
            + ", ".join(f"{feed} {n:,}" for feed, n in self.consumed_now.items())
        )
        self.metrics.dbt_runs.append(
            {
                "t": self.metrics.at(),
                "seconds": time.monotonic() - started,
                "started_wall": started_wall,
                "done_wall": time.time(),
                "consumed": dict(self.consumed_now),
            }
        )
        self.progress.set_activity("")

    def _barriers(self) -> None:
        import psycopg

        from changefeed.client import PostgresFeed

        with psycopg.connect(self.uri, autocommit=True) as conn:
            for feed in FEEDS:
                client = PostgresFeed(feed)
                for shard in range(self.options.shards):
                    client.barrier_wait(conn, shard, timeout_s=60.0)

    def _sample(self, generator: LoadGenerator, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self._sample_once(generator)

    def _sample_once(self, generator: LoadGenerator) -> None:
        events = generator.stats.snapshot()["events"]
        self.metrics.samples.append(
            (self.metrics.at(), events["shop.orders"], events["shop.payments"])
        )

    def _status_line(self, generator: LoadGenerator) -> str:
        load = generator.stats.snapshot()
        written = sum(load["events"].values())
        landed = sum(self.landed_now.values()) - sum(v[0] for v in self.landed_before.values())
        consumed = sum(self.consumed_now.values()) - sum(self.consumed_before.values())
        if generator.running:
            rate = load["transactions"] / max(self.metrics.at(), 1e-9)
            state = f"{rate:.0f} txn/s, {load['rolled_back']} rolled back"
        else:
            state = "load stopped"
        return f"written {written:,} events ({state}) | landed {landed:,} | consumed {consumed:,}"

    # -- summary, chart, history -------------------------------------------------------

    def _summary(
        self,
        load: dict[str, Any],
        load_seconds: float,
        check: CheckResult,
        generator: LoadGenerator,
    ) -> list[str]:
        lines = [f"== changefeed demo: summary of run {self.run_number} =="]
        header = (
            f"{'feed':<15}{'mode':<10}{'written':>9}{'rolled back':>13}{'landed':>9}"
            f"{'consumed':>10}  {'batches':<9}{'all runs: landed':>17}"
        )
        lines.append(header)
        totals = {"written": 0, "landed": 0, "consumed": 0}
        for feed, (mode, _table, _key) in FEEDS.items():
            written = load["events"][feed]
            landed = self.landed_now[feed] - self.landed_before[feed][0]
            consumed = self.consumed_now.get(feed, 0) - self.consumed_before.get(feed, 0)
            batches = self.batches[feed]
            span = (
                f"{batches[0]}-{batches[-1]}"
                if len(batches) > 1
                else str(batches[0])
                if batches
                else "-"
            )
            rolled = int(self._rolled_back_this_run(feed))
            lines.append(
                f"{feed:<15}{mode:<10}{written:>9,}{rolled:>13,}{landed:>9,}"
                f"{consumed:>10,}  {span:<9}{check.feeds[feed].landed:>17,}"
            )
            totals["written"] += written
            totals["landed"] += landed
            totals["consumed"] += consumed
        lines.append(
            f"{'total':<25}{totals['written']:>9,}{'':>13}{totals['landed']:>9,}"
            f"{totals['consumed']:>10,}"
        )
        txns = load["transactions"]
        lines.append(
            f"throughput: {totals['written'] / load_seconds:,.1f} events/s written "
            f"({txns:,} transactions in {load_seconds:.0f} s, {txns / load_seconds:.1f}/s "
            f"of the {self.options.rate:g}/s asked for; "
            f"{load['rolled_back']} rolled back, {load['long']} long); "
            f"{len(self.metrics.landings)} batches landed continuously, "
            f"{len(self.metrics.dbt_runs)} dbt runs"
        )
        lines.append(
            f"latency, event committed -> landed in Spark (--continuous --interval "
            f"{INTERVAL:g} --poll {POLL:g}; bar at 1,000 events/s: p50 <= 2 s, p99 <= 5 s):"
        )
        for feed in FEEDS:
            measured = [x for v in self.metrics.latencies.get(feed, {}).values() for x in v]
            if measured:
                lines.append(
                    f"  {feed:<15}p50 {percentile(measured, 0.5):.2f} s, "
                    f"p99 {percentile(measured, 0.99):.2f} s, max {max(measured):.2f} s "
                    f"({len(measured):,} events)"
                )
            else:
                lines.append(f"  {feed:<15}no event measured (nothing committed this run)")
        model_lag = max((x["lag_max"] for x in self._dbt_lags()), default=None)
        if model_lag is not None:
            lines.append(
                f"latency, event committed -> in the dbt models: max {model_lag:.1f} s "
                f"(dbt every {self.options.cycle:g} s)"
            )
        behind = sum(f.committed - f.consumed for f in check.feeds.values())
        lines.append(
            f"lag at the end: {behind:,} events behind (landed and consumed up to the barrier)"
        )
        committed = sum(f.committed for f in check.feeds.values())
        rolled = sum(f.rolled_back for f in check.feeds.values())
        if check.passed:
            lines.append(
                f"exactly-once check: PASSED: all {committed:,} committed events (all runs) are in "
                f"Spark exactly once, landed and consumed; none of the {rolled:,} rolled-back "
                f"events is; revenue per hour equals PostgreSQL's ({check.revenue_hours} h)"
            )
        else:
            lines.append("exactly-once check: FAILED")
            lines.extend("  " + p for p in check.all_problems()[:20])
        lines.append(f"chart: {self.layout.chart_file}")
        lines.append(
            "next: `make demo` again continues from here; "
            "`make demo-status` shows the feeds and the lag"
        )
        return lines

    def _mark_running(self) -> None:
        """Record the run as started: if it is interrupted, the next run knows not to trust
        the last entry's totals."""
        entry = {"run": self.run_number, "status": "running"}
        self.layout.runs_file.write_text(json.dumps([*self.history, entry], indent=2) + "\n")

    def _rolled_back_this_run(self, feed: str) -> int:
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as pg:
            row = pg.execute(
                "select count(*) from shop_audit.rolled_back_events where feed = %s and run = %s",
                (feed, self.run_number),
            ).fetchone()
        return int(row[0]) if row else 0

    def _save(
        self, load: dict[str, Any], load_seconds: float, check: CheckResult, summary: list[str]
    ) -> None:
        charts = self._charts()
        page = report_html(f"changefeed demo, run {self.run_number}", summary, charts)
        self.layout.run_chart_file(self.run_number).write_text(page)
        self.layout.chart_file.write_text(page)
        entry = {
            "run": self.run_number,
            "status": "finished",
            "started": datetime.fromtimestamp(self.metrics.started_wall, timezone.utc).isoformat(),
            "load_seconds": round(load_seconds, 1),
            "written": load["events"],
            "transactions": load["transactions"],
            "batches": self.batches,
            "check": "passed" if check.passed else "failed",
            "by_feed": {
                feed: {
                    "landed": self.landed_now[feed],
                    "consumed": self.consumed_now.get(feed, 0),
                    "batch": max(self.batches[feed], default=self.landed_before[feed][1]),
                }
                for feed in FEEDS
            },
            "totals": {
                "committed": sum(f.committed for f in check.feeds.values()),
                "landed": sum(f.landed for f in check.feeds.values()),
                "consumed": sum(f.consumed for f in check.feeds.values()),
            },
        }
        self.history.append(entry)
        self.layout.runs_file.write_text(json.dumps(self.history, indent=2) + "\n")

    def _charts(self) -> list[str]:
        samples = self.metrics.samples
        written: list[tuple[float, float]] = []
        window = 5
        for i in range(window, len(samples)):
            t0, o0, p0 = samples[i - window]
            t1, o1, p1 = samples[i]
            if t1 > t0:
                written.append((t1, ((o1 + p1) - (o0 + p0)) / (t1 - t0)))
        # Landed: events of both feeds per 5 s window, as the written series.
        landed: list[tuple[float, float]] = []
        windows: dict[int, int] = {}
        for entry in self.metrics.landings:
            windows[int(entry.t // window)] = windows.get(int(entry.t // window), 0) + entry.events
        for index in range(max(windows, default=-1) + 1):
            landed.append(((index + 1) * window, windows.get(index, 0) / window))
        x_max = max(
            [t for t, _o, _p in samples]
            + [x.t for x in self.metrics.landings]
            + [x["t"] for x in self.metrics.dbt_runs]
            + [1.0]
        )
        marks = [(self.load_seconds, "load stopped")] if self.load_seconds else []
        throughput = line_chart(
            "Throughput",
            [
                Series("written (events/s, 5 s window)", "#1f77b4", written),
                Series("landed (events/s per landing cycle)", "#2ca02c", landed, markers=True),
            ],
            "seconds since the load started",
            "events/s",
            x_max=x_max,
            marks=marks,
        )
        # Both feeds' batches share the latency series: each point names its feed and batch.
        measured = [
            (x, self.metrics.latencies.get(x.feed, {}).get(x.batch, []))
            for x in self.metrics.landings
        ]
        measured = [(x, sorted(v)) for x, v in measured if v]
        labels = [f"{x.feed} batch {x.batch}, {len(v)} events" for x, v in measured]
        lag = line_chart(
            "Latency",
            [
                Series(
                    "committed -> landed in Spark, median of the batch",
                    "#ff7f0e",
                    [(x.t, percentile(v, 0.5)) for x, v in measured],
                    markers=True,
                    labels=labels,
                ),
                Series(
                    "committed -> landed in Spark, max of the batch",
                    "#d62728",
                    [(x.t, v[-1]) for x, v in measured],
                    markers=True,
                    labels=labels,
                ),
                Series(
                    "committed -> dbt models, max",
                    "#9467bd",
                    [(x["t"], x["lag_max"]) for x in self._dbt_lags()],
                    dashed=True,
                    markers=True,
                ),
            ],
            "seconds since the load started",
            "seconds",
            x_max=x_max,
            marks=marks,
        )
        return [throughput, lag]

    def _dbt_lags(self) -> list[dict[str, float]]:
        """Per dbt run, the longest an event it consumed waited from its commit to the
        run's end: its events are those of the batches landed before it started and
        after the previous run started."""
        lags = []
        previous = -float("inf")
        for run in self.metrics.dbt_runs:
            commits = [
                x.committed_at - latency
                for x in self.metrics.landings
                if previous <= x.committed_at < run["started_wall"]
                for latency in self.metrics.latencies.get(x.feed, {}).get(x.batch, [])
            ]
            previous = run["started_wall"]
            if commits:
                lags.append({"t": run["t"], "lag_max": run["done_wall"] - min(commits)})
        return lags


class _Background:
    """Run ``work`` in a thread now; :meth:`result` waits and returns (or raises) its result."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._result = work()
        except BaseException as exc:
            self._error = exc

    def result(self) -> Any:
        while self._thread.is_alive():
            self._thread.join(0.2)  # short joins keep Ctrl-C responsive
        if self._error is not None:
            raise self._error
        return self._result
