"""``changefeed land`` with several feeds: one landing service, one Spark application.

    changefeed land --feed 'shop.*' --table 'landing.{schema}_{table}' --payload
    changefeed land --feed shop.orders,shop.customers --table 'landing.{table}_feed' ...
    changefeed land --feeds-file feeds.yml --continuous --interval 1 --poll 0.2

Feeds are named by id or by pattern (``*``, ``?``, ``[...]``, matched against the feeds
registered in the database); ``--table`` is then a template in which ``{schema}`` and
``{table}`` are the two parts of each feed's id. A feeds file (YAML) names feeds, tables
and per-feed options (:func:`load_feeds_file`). Each feed lands as ``changefeed land``
lands one (its own writer lock, cursors and checks), from one Spark application
(:class:`changefeed.spark.landing.LandingService`); a feed that fails is retried with a
backoff while the others land on. One-shot: every feed once (``--attempts`` runs at most
for a failing one), a line per feed, exit code 1 if any feed failed. Continuous: until
SIGINT/SIGTERM, which lets the runs in flight finish.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from changefeed.cli import CliError, first_line

#: The keys of a feeds file's entry (and of its ``defaults``), and the option of
#: ``format("changefeed")`` each sets; ``table`` and ``table_format`` are the landing's.
ENTRY_OPTIONS = {
    "connection": "connection",
    "changefeed_schema": "changefeedSchema",
    "payload": "payload",
    "shards": "shards",
    "page_size": "pageSize",
    "starting_position": "startingPosition",
    "move_outbox": "moveOutbox",
    "consumer": "consumer",
}
ENTRY_KEYS = ("feed", "table", "table_format", *ENTRY_OPTIONS)
FORMATS = ("parquet", "delta", "iceberg")


def is_service(args: argparse.Namespace) -> bool:
    """Whether the command line names more than one feed, a pattern or a feeds file, or
    asks for what only the service has (``--workers``, ``--attempts``, ``--status-file``)."""
    feeds = split_feeds([args.feed or ""])
    options = (args.feeds_file, args.workers, args.attempts, args.status_file)
    return (
        any(o is not None for o in options) or len(feeds) != 1 or any(c in feeds[0] for c in "*?[")
    )


def split_feeds(values: Sequence[str]) -> list[str]:
    """``--feed`` values, each possibly a comma-separated list.

    >>> split_feeds(["shop.orders,shop.items", " billing.* "])
    ['shop.orders', 'shop.items', 'billing.*']
    """
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def load_feeds_file(path: Path) -> dict[str, Any]:
    """A feeds file: ``feeds`` (a list of entries), and optionally ``connection`` and
    ``defaults`` (an entry's keys, for every entry). Each entry has ``feed`` (an id or a
    pattern) and ``table`` (a name, or a template with ``{schema}`` and ``{table}``), and
    may set ``table_format`` and any of :data:`ENTRY_OPTIONS`. Raises :class:`CliError`
    naming the entry and the key for anything else."""
    import yaml  # type: ignore[import-untyped,unused-ignore]

    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise CliError(f"cannot read the feeds file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"the feeds file {path} is not valid YAML: {first_line(exc)}") from None
    if not isinstance(document, dict) or not isinstance(document.get("feeds"), list):
        raise CliError(
            f"the feeds file {path} must be a mapping with a list `feeds:` (each entry with "
            '`feed:` and `table:`; see docs/spark-source.md, "Landing many feeds")'
        )
    unknown = sorted(set(document) - {"feeds", "connection", "defaults"})
    if unknown:
        raise CliError(f"the feeds file {path}: unknown key(s) {', '.join(unknown)}; "
                       "accepted: feeds, connection, defaults")  # fmt: skip
    defaults = document.get("defaults") or {}
    _check_entry(path, "defaults", defaults, needs=())
    for n, entry in enumerate(document["feeds"], 1):
        _check_entry(path, f"entry {n}", entry, needs=("feed", "table"), defaults=defaults)
    return document


def _check_entry(
    path: Path, where: str, entry: Any, needs: Sequence[str], defaults: Mapping[str, Any] = {}
) -> None:
    if not isinstance(entry, dict):
        raise CliError(f"the feeds file {path}, {where}: must be a mapping of keys to values")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise CliError(f"the feeds file {path}, {where}: unknown key(s) {', '.join(unknown)}; "
                       f"accepted: {', '.join(ENTRY_KEYS)}")  # fmt: skip
    missing = [key for key in needs if key not in entry and key not in defaults]
    if missing:
        raise CliError(f"the feeds file {path}, {where}: `{missing[0]}:` is missing")
    fmt = entry.get("table_format")
    if fmt is not None and fmt not in FORMATS:
        raise CliError(f"the feeds file {path}, {where}: table_format must be one of "
                       f"{', '.join(FORMATS)}, got {fmt!r}")  # fmt: skip


def option_value(key: str, value: Any) -> str:
    """A feeds file's value as the option's text.

    >>> option_value("payload", True), option_value("shards", [0, 2]), option_value("x", 500)
    ('true', '0,2', '500')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "shards" and isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def service_targets(args: argparse.Namespace, shared: Mapping[str, str]) -> list[Any]:
    """The service's :class:`FeedTarget` list from the command line (``shared``: the
    options of its flags) or the feeds file; patterns are matched against the database."""
    from changefeed.spark.landing import ChangefeedSourceError, resolve_targets

    try:
        if not args.feeds_file:
            if not args.table:
                raise CliError("--table is required: the table, or with several feeds a "
                               "template such as 'landing.{schema}_{table}'")  # fmt: skip
            return resolve_targets(shared, split_feeds([args.feed or ""]), args.table,
                                   table_format=args.table_format)  # fmt: skip
        if args.feed:
            raise CliError("--feed and --feeds-file name the feeds twice: give one of them")
        document = load_feeds_file(Path(args.feeds_file))
        top = {} if "connection" not in document else {"connection": str(document["connection"])}
        defaults = dict(document.get("defaults") or {})
        targets: list[Any] = []
        for entry in document["feeds"]:
            merged = {**defaults, **entry}
            options = {**shared, **top}
            for key, option in ENTRY_OPTIONS.items():
                if key in merged:
                    options[option] = option_value(key, merged[key])
            if not options.get("connection"):
                raise CliError("no connection: give --connection, set CHANGEFEED_CONNECTION, "
                               "or write `connection:` in the feeds file")  # fmt: skip
            targets += resolve_targets(
                options, split_feeds([str(merged["feed"])]), str(merged["table"]),
                table_format=merged.get("table_format") or args.table_format,
            )  # fmt: skip
        return targets
    except ChangefeedSourceError as exc:
        raise CliError(str(exc)) from None


def run_service(args: argparse.Namespace, spark: Any, targets: Sequence[Any]) -> int:
    """Land ``targets`` once or continuously (``args.continuous``); the exit code."""
    from changefeed.spark.landing import LandingService

    stop = threading.Event()
    printer = ServicePrinter(len(targets), args.interval, verbose=args.verbose,
                             quiet=args.quiet, continuous=args.continuous)  # fmt: skip
    service = LandingService(
        spark, targets, interval=args.interval, poll=args.poll, workers=args.workers,
        on_result=printer.result, on_error=printer.error, status_file=args.status_file,
    )  # fmt: skip
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        if args.continuous:
            service.run(stop)
            print(f"changefeed land: stopped ({len(targets)} feeds)", flush=True)
            return 0
        final = service.run_once(attempts=args.attempts, stop=stop)
    finally:
        service.close()
    failed = [s for s in final if s.state != "ok"]
    for status in failed:
        print(f"changefeed land: {status.line()}", file=sys.stderr, flush=True)
    landed = sum(1 for s in final if s.state == "ok")
    print(f"changefeed land: {len(final)} feeds: {landed} landed, {len(failed)} failed",
          flush=True)  # fmt: skip
    return 1 if failed else 0


#: The most often a continuous service says that its feeds found nothing new, by default.
IDLE_LINE_SECONDS = 60.0


class ServicePrinter:
    """The service's output: each batch (and snapshot) landed, each failed run on stderr,
    and in a continuous service that lands nothing, one line at most every
    ``max(interval, IDLE_LINE_SECONDS)`` for all its feeds (``verbose``: every run;
    ``quiet``: only failures)."""

    def __init__(
        self,
        feeds: int,
        interval: float,
        *,
        verbose: bool = False,
        quiet: bool = False,
        continuous: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.feeds, self.verbose, self.quiet = feeds, verbose, quiet
        self.continuous = continuous
        self.idle_every = max(interval, IDLE_LINE_SECONDS)
        self.clock = clock
        self.last_line = clock()
        self.lock = threading.Lock()

    def result(self, target: Any, result: Any) -> None:
        with self.lock:
            if self.quiet:
                return
            now = self.clock()
            if not result.idle or self.verbose or not self.continuous:
                self.last_line = now
                print(f"{target.feed}: {result.summary()}", flush=True)
            elif now - self.last_line >= self.idle_every:
                self.last_line = now
                print(f"changefeed land: {self.feeds} feeds, nothing new in the last "
                      f"{self.idle_every:.0f} s", flush=True)  # fmt: skip

    def error(self, target: Any, exc: BaseException, retry_in: float | None) -> None:
        then = "giving up" if retry_in is None else f"retrying in {retry_in:.0f} s"
        with self.lock:
            print(f"changefeed land: {target.feed} -> {target.table}: failed ({then}): "
                  f"{_redacted(exc)}", file=sys.stderr, flush=True)  # fmt: skip


def _redacted(exc: BaseException) -> str:
    from changefeed.client import redact

    return redact(first_line(exc))
