"""The demo's orchestration: PostgreSQL, dbt-postgres, load, landing, dbt-spark, check."""

from __future__ import annotations

import json
import shutil
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from shop_demo._chart import Series, line_chart, report_html
from shop_demo._check import CheckResult, run_check
from shop_demo._dbt import DbtProject, postgres_output, spark_session_output
from shop_demo._errors import DemoError
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
    landings: list[dict[str, Any]] = field(default_factory=list)
    dbt_runs: list[dict[str, Any]] = field(default_factory=list)

    def at(self) -> float:
        return time.monotonic() - self.started


def start_postgres(layout: DemoLayout) -> tuple[str, Any]:
    """The demo's embedded server: data in ``<state>/pg``, stopped when the demo exits."""
    layout.pg_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver warns about XDG_RUNTIME_DIR on import
        try:
            import pgserver
        except ImportError:
            raise DemoError(
                "pgserver is not installed, so there is no embedded PostgreSQL: run `make demo` "
                "(it installs everything into .venv) or `pip install -e '.[postgres,dev]'`"
            ) from None
        try:
            handle = pgserver.get_server(str(layout.pg_dir), cleanup_mode="stop")  # type: ignore[attr-defined]
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
        self.landing_seconds = 0.0
        self._pending_first_ms: list[int] = []

    # -- the run -----------------------------------------------------------------------

    def run(self) -> int:
        # Deprecation notes from inside pyspark are not the user's business here.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\.")
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
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

        say(
            f"load: {self.options.writers} writers, ~{self.options.rate:g} transactions/s on "
            f"{self.options.shards} shards for {self.options.duration:g} s; landing and dbt "
            f"every {self.options.cycle:g} s"
        )
        self._mark_running()
        self.metrics.started = time.monotonic()
        self.metrics.started_wall = time.time()
        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(generator, sampler_stop), daemon=True)
        generator.start()
        sampler.start()
        # The load stops on time, whatever the landing loop is doing.
        timer = threading.Timer(self.options.duration, generator.stop)
        timer.daemon = True
        timer.start()
        self.progress.set_status(lambda: self._status_line(generator))
        interrupted = False
        try:
            self.progress.set_activity("starting Spark")
            self.spark = spark_job.result()
            say(f"Spark: ready after {time.monotonic() - spark_started:.1f} s")
            self.progress.set_activity("reading what earlier runs landed and consumed")
            self._baseline()
            # A cycle starts every `cycle` seconds from the start of the load (right away if
            # one is overdue, e.g. when Spark took longer to start).
            next_cycle = self.metrics.started + self.options.cycle
            while generator.running:
                self.progress.set_activity("waiting for the next landing")
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
            sampler.join(2.0)
            self._sample_once(generator)
            self.progress.set_status(None)
            self.progress.set_activity("")
        if interrupted:
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
        with self.progress.step("final landing and dbt run", "final landing"):
            self._cycle(analytics)
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

    def _cycle(self, analytics: DbtProject) -> None:
        from shop_demo._spark import batch_stats, consumed_totals, land_feed

        for feed, (_mode, table, _key) in FEEDS.items():
            self.progress.set_activity(f"landing {feed} into {table}")
            result = land_feed(self.spark, self.uri, feed, table)
            self.landing_seconds += result.seconds
            if result.batch is None:
                self.progress.say(f"landed {feed}: nothing new ({result.seconds:.1f} s)")
                continue
            stats = batch_stats(self.spark, table, result.batch, time.time())
            landed_ms = stats.landed_at * 1000
            self.batches[feed].append(result.batch)
            self.landed_now[feed] += stats.events
            self._pending_first_ms.append(stats.first_ms)
            self.progress.say(
                f"landed {feed} into {table}: batch {result.batch}, {stats.events:,} events "
                f"in {result.seconds:.1f} s"
            )
            self.metrics.landings.append(
                {
                    "t": self.metrics.at(),
                    "cycle": len(self.metrics.dbt_runs),
                    "feed": feed,
                    "batch": result.batch,
                    "events": stats.events,
                    "seconds": result.seconds,
                    "lag_p50": max(0.0, (landed_ms - stats.median_ms) / 1000),
                    "lag_max": max(0.0, (landed_ms - stats.first_ms) / 1000),
                }
            )
        self.progress.set_activity(
            "dbt run (examples/shop/analytics: order_updates, "
            "payments_hourly, current_orders, revenue_per_hour)"
        )
        started = time.monotonic()
        analytics.invoke(["run"])
        done_ms = time.time() * 1000
        self.consumed_now = consumed_totals(self.spark)
        self.progress.say(
            f"dbt run: done in {time.monotonic() - started:.1f} s; consumed so far: "
            + ", ".join(f"{feed} {n:,}" for feed, n in self.consumed_now.items())
        )
        lag = max(((done_ms - ms) / 1000 for ms in self._pending_first_ms), default=0.0)
        self._pending_first_ms = []
        self.metrics.dbt_runs.append(
            {
                "t": self.metrics.at(),
                "seconds": time.monotonic() - started,
                "consumed": dict(self.consumed_now),
                "lag_max": max(0.0, lag),
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
        landings = len(self.metrics.dbt_runs)
        lines.append(
            f"throughput: {totals['written'] / load_seconds:,.1f} events/s written "
            f"({txns:,} transactions in {load_seconds:.0f} s, {txns / load_seconds:.1f}/s; "
            f"{load['rolled_back']} rolled back, {load['long']} long); "
            f"{landings} landing+dbt cycles, {self.landing_seconds / max(landings, 1):.1f} s "
            "of landing each"
        )
        lags = self.metrics.landings
        if lags:
            p50 = statistics.median(x["lag_p50"] for x in lags)
            worst = max(x["lag_max"] for x in lags)
            model_lag = max((x["lag_max"] for x in self.metrics.dbt_runs), default=0.0)
            lines.append(
                f"lag: event written -> landed in Spark: median {p50:.1f} s, max {worst:.1f} s; "
                f"-> in the dbt models: max {model_lag:.1f} s (landing every "
                f"{self.options.cycle:g} s)"
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
        landed: list[tuple[float, float]] = []
        previous_t = 0.0
        # One point per landing cycle: the events of both feeds over the time since the last.
        by_cycle: dict[int, tuple[float, int]] = {}
        for entry in self.metrics.landings:
            t, events = by_cycle.get(entry["cycle"], (0.0, 0))
            by_cycle[entry["cycle"]] = (max(t, entry["t"]), events + entry["events"])
        for _cycle, (t, events) in sorted(by_cycle.items()):
            landed.append((t, events / max(t - previous_t, 1.0)))
            previous_t = t
        x_max = max(
            [t for t, _o, _p in samples]
            + [x["t"] for x in self.metrics.landings]
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
        # Both feeds' landings share the lag series: each point names its feed and batch.
        landing_labels = [
            f"{x['feed']} batch {x['batch']}" if x["batch"] is not None else f"{x['feed']}"
            for x in self.metrics.landings
        ]
        lag = line_chart(
            "Lag",
            [
                Series(
                    "written -> Spark, median",
                    "#ff7f0e",
                    [(x["t"], x["lag_p50"]) for x in self.metrics.landings],
                    markers=True,
                    labels=landing_labels,
                ),
                Series(
                    "written -> Spark, max",
                    "#d62728",
                    [(x["t"], x["lag_max"]) for x in self.metrics.landings],
                    markers=True,
                    labels=landing_labels,
                ),
                Series(
                    "written -> dbt models, max",
                    "#9467bd",
                    [(x["t"], x["lag_max"]) for x in self.metrics.dbt_runs],
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
