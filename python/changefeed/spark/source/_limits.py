"""Admission control of the streaming source: ``maxEventsPerTrigger`` bounds a micro-batch
without ever splitting a source transaction, ``minEventsPerTrigger`` waits for enough
events, at most ``maxTriggerDelay`` (docs/spark-source.md, Bounded micro-batches).

A micro-batch's end on a shard is where ``read_feed`` ends a page of the shard's share of
the limit: a page ends at a transaction boundary and holds a transaction larger than the
page whole (protocol 8), and is cut at the observed safe point, itself the end of a block.
So every end is a boundary, and by C3 the range ``(start, end]`` reads the same events
whenever a replay reads it again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from changefeed.dialects import Backend, SourceFeed
from changefeed.spark.source._read_range import read_range


def bounded_ends(
    backend: Backend,
    info: SourceFeed,
    starts: Mapping[int, bytes],
    ends: Mapping[int, bytes],
    limit: int,
) -> dict[int, bytes]:
    """``ends`` lowered so that the range from ``starts`` holds about ``limit`` events.

    The limit is split evenly among the shards that have events in their range (at least
    one event each, so a micro-batch holds at most ``max(limit, such shards)`` events,
    more only when one transaction alone is larger than its shard's share). Shards
    without events keep their end.
    """
    pending = [
        shard
        for shard in sorted(ends)
        if ends[shard] > starts[shard]
        and backend.has_events(info, shard, starts[shard], ends[shard])
    ]
    bounded = dict(ends)
    if not pending:
        return bounded
    share = max(1, limit // len(pending))
    keys_only = replace(info, payload=None)  # the page's keys suffice to find its end
    for shard in pending:
        first = next(read_range(backend, keys_only, shard, starts[shard], ends[shard], share))
        bounded[shard] = bytes(first[-1][1])
    return bounded


def events_up_to(
    backend: Backend,
    info: SourceFeed,
    starts: Mapping[int, bytes],
    ends: Mapping[int, bytes],
    cap: int,
) -> int:
    """How many events the ranges hold, counted up to ``cap`` (at least: whole pages)."""
    keys_only = replace(info, payload=None)
    total = 0
    for shard in sorted(ends):
        for page in read_range(backend, keys_only, shard, starts[shard], ends[shard], cap - total):
            total += len(page)
            if total >= cap:
                return total
    return total


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", re.IGNORECASE)
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_delay(raw: str) -> float | None:
    """``maxTriggerDelay``: seconds, or a number with ms, s, m or h; None if malformed.

    >>> parse_delay("15m"), parse_delay("30"), parse_delay("soon")
    (900.0, 30.0, None)
    """
    found = _DURATION.fullmatch(str(raw))
    if not found:
        return None
    return float(found.group(1)) * _UNIT[(found.group(2) or "s").lower()]
