"""``changefeed status --format prometheus``: the status as Prometheus text exposition.

Format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/): one ``# HELP``
and one ``# TYPE`` line per metric family, then its samples, label values escaped
(backslash, double quote, newline). Every metric is a gauge: each run reads the current
state, so a scrape through node_exporter's textfile collector or a script exporter sees
the values of that moment. :data:`METRICS` is the one list of names, documented in
docs/operations.md (a test checks that the page lists exactly these).

Samples whose value the CLI does not know are left out rather than reported as 0: the age
of the oldest pending write where the user may not read the session table (the reader
role, SQL Server), the outbox backlog where it may not read the outbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from changefeed.cli.status_types import ConsumerLag, FeedStatus, ShardStatus
from changefeed.service_state import FeedState

#: name -> help text. Order is the output order.
METRICS: dict[str, str] = {
    "changefeed_feed_info": "A registered feed (always 1), labelled with its mode and capture.",
    "changefeed_capture_lost": "1 when a capture: trigger feed's source table has lost its "
    "capture triggers or has them disabled (CF011, CaptureLost): its writes are not captured.",
    "changefeed_head_timestamp_seconds": "Time of the shard's head ULID (the newest block "
    "handed out, writes in progress included), in Unix seconds.",
    "changefeed_safe_point_timestamp_seconds": "Time of the shard's safe point ULID (what "
    "readers may read up to), in Unix seconds.",
    "changefeed_pending_writes": "Writes in progress on the shard (pending sessions).",
    "changefeed_oldest_pending_write_age_seconds": "Age of the shard's oldest pending write "
    "(0 when none); a stalled writer holds the safe point back while this grows.",
    "changefeed_outbox_rows": "Outbox rows of the shard not moved into the feed yet.",
    "changefeed_retention_horizon_timestamp_seconds": "Time of the newest event retention "
    "removed from the shard; readers with a cursor below it fail (fell behind retention).",
    "changefeed_consumer_lag_events": "Events after the consumer's cursor up to the safe point.",
    "changefeed_consumer_lag_seconds": "Age of the oldest event the consumer has not read "
    "(0 when it is caught up).",
    "changefeed_consumer_behind_retention": "1 when the consumer's cursor lies below the "
    "shard's retention horizon: it cannot continue and must re-snapshot.",
    "changefeed_landing_feed_failures": "A landing service's feed (status --service): its "
    "failed runs in a row, 0 when its last run succeeded.",
    "changefeed_landing_feed_last_success_timestamp_seconds": "A landing service's feed: "
    "when its last successful run ended, in Unix seconds.",
    "changefeed_landing_feed_events": "A landing service's feed: events it landed since the "
    "service started.",
}

Labels = Mapping[str, str]


def escape(value: str) -> str:
    r"""A label value escaped for the text format.

    >>> escape('a"b\\c\nd')
    'a\\"b\\\\c\\nd'
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: integers without a fraction, others with millisecond precision.

    >>> number(3), number(1.5), number(1732234700.2781)
    ('3', '1.5', '1732234700.278')
    """
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0")


def exposition(
    feeds: Sequence[FeedStatus],
    shards: Sequence[ShardStatus],
    lags: Sequence[ConsumerLag],
    landing: Sequence[FeedState] = (),
) -> str:
    """The text exposition of one ``status`` run (``landing``: a landing service's feeds,
    ``--service``)."""
    samples: dict[str, list[tuple[Labels, float]]] = {name: [] for name in METRICS}
    for f in feeds:
        samples["changefeed_feed_info"].append(
            ({"feed": f.feed, "mode": f.mode, "capture": f.capture}, 1)
        )
        if f.capture_lost is not None:
            samples["changefeed_capture_lost"].append(({"feed": f.feed}, int(f.capture_lost)))
    for s in shards:
        labels = {"feed": s.feed, "shard": str(s.shard)}
        if s.head_unix is not None:
            samples["changefeed_head_timestamp_seconds"].append((labels, s.head_unix))
        if s.safe_point_unix is not None:
            samples["changefeed_safe_point_timestamp_seconds"].append((labels, s.safe_point_unix))
        samples["changefeed_pending_writes"].append((labels, s.pending))
        if s.oldest_pending_age_s is not None:
            samples["changefeed_oldest_pending_write_age_seconds"].append(
                (labels, s.oldest_pending_age_s)
            )
        if s.outbox is not None:
            samples["changefeed_outbox_rows"].append((labels, s.outbox))
        if s.retention_horizon_unix is not None:
            samples["changefeed_retention_horizon_timestamp_seconds"].append(
                (labels, s.retention_horizon_unix)
            )
    for c in lags:
        labels = {"consumer": c.consumer, "feed": c.feed, "shard": str(c.shard)}
        samples["changefeed_consumer_lag_events"].append((labels, c.lag_events))
        samples["changefeed_consumer_lag_seconds"].append((labels, c.oldest_unread_age_s or 0.0))
        samples["changefeed_consumer_behind_retention"].append((labels, int(c.behind_retention)))
    for state in landing:
        labels = {"feed": state.feed, "table": state.table}
        samples["changefeed_landing_feed_failures"].append((labels, state.failures))
        if state.last_success is not None:
            samples["changefeed_landing_feed_last_success_timestamp_seconds"].append(
                (labels, state.last_success)
            )
        samples["changefeed_landing_feed_events"].append((labels, state.events))
    return "".join(_family(name, samples[name]) for name in METRICS)


def _family(name: str, samples: Iterable[tuple[Labels, float]]) -> str:
    lines = [f"# HELP {name} {METRICS[name]}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        text = ",".join(f'{key}="{escape(val)}"' for key, val in labels.items())
        lines.append(f"{name}{{{text}}} {number(value)}")
    return "\n".join(lines) + "\n"
