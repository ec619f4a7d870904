"""The options of ``format("changefeed")``, validated once with errors that name the fix."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from changefeed.dialects import Connection, parse_connection
from changefeed.errors import ChangefeedSourceError
from changefeed.spark.source._limits import parse_delay
from changefeed.spark.source._positions import (
    StartingPosition,
    decode_offset,
    parse_starting_position,
)
from changefeed.spark.source._retention import consumer_name

DEFAULT_PAGE_SIZE = 10_000
#: Seconds a minEventsPerTrigger query waits at most (Spark's Kafka source: 15 minutes).
DEFAULT_TRIGGER_DELAY = 900.0

#: Option name (lower case, as Spark's options are case-insensitive) -> documented spelling.
OPTIONS = {
    "connection": "connection",
    "user": "user",
    "password": "password",
    "feed": "feed",
    "shards": "shards",
    "pagesize": "pageSize",
    "startingposition": "startingPosition",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "payload": "payload",
    "moveoutbox": "moveOutbox",
    "changefeedschema": "changefeedSchema",
    "consumer": "consumer",
    "maxeventspertrigger": "maxEventsPerTrigger",
    "mineventspertrigger": "minEventsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
}
_FEED = re.compile(r"[^.\s]+\.[^.\s]+")


@dataclass(frozen=True)
class FeedOptions:
    connection: Connection
    feed: str
    shards: tuple[int, ...] | None
    page_size: int
    starting_position: StartingPosition
    starting_offsets: dict[int, bytes] | None
    ending_offsets: dict[int, bytes] | None
    payload: bool
    move_outbox: bool
    changefeed_schema: str
    consumer: str | None = None
    """The name this reader's committed cursors are registered under (retention)."""
    max_events_per_trigger: int | None = None
    """Streaming: about this many events per micro-batch, never splitting a transaction."""
    min_events_per_trigger: int | None = None
    """Streaming: no micro-batch with fewer new events, until ``max_trigger_delay``."""
    max_trigger_delay: float = DEFAULT_TRIGGER_DELAY
    """Streaming: seconds after the last micro-batch when one runs whatever is new."""


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ChangefeedSourceError(f"option {OPTIONS[name]} must be true or false, got {raw!r}")


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    text = str(raw).strip()
    value = int(text) if text.isdigit() else 0
    if not 1 <= value < 2**31:
        raise ChangefeedSourceError(
            f"option {OPTIONS[name]} must be a positive integer (events), got {raw!r}"
        )
    return value


def parse_shards(raw: str | None) -> tuple[int, ...] | None:
    """``"0,1,2"``, ``"[0, 1]"`` or ``None`` (every shard of the feed).

    >>> parse_shards("2, 0,1")
    (0, 1, 2)
    """
    if raw is None or str(raw).strip() in ("", "all", "*"):
        return None
    text = str(raw).strip()
    try:
        items = json.loads(text) if text.startswith("[") else text.split(",")
        shards = sorted({int(str(item).strip()) for item in items})
    except (ValueError, TypeError):
        raise ChangefeedSourceError(
            f"option shards must be a comma-separated list of shard ids such as 0,1,2; got {raw!r}"
        ) from None
    if not shards or any(s < -(2**31) or s >= 2**31 for s in shards):
        raise ChangefeedSourceError(f"option shards must hold 32-bit shard ids; got {raw!r}")
    return tuple(shards)


def parse_options(options: Mapping[str, str]) -> FeedOptions:
    """Validate ``options`` (a case-insensitive mapping from Spark, or a plain dict)."""
    lowered = {str(k).lower(): v for k, v in options.items() if v is not None}
    unknown = sorted(k for k in lowered if k not in OPTIONS and k != "path")
    if unknown:
        raise ChangefeedSourceError(
            f"unknown option(s) {', '.join(unknown)} for format('changefeed'); accepted: "
            f"{', '.join(OPTIONS.values())}"
        )
    for required in ("connection", "feed"):
        if not str(lowered.get(required, "")).strip():
            raise ChangefeedSourceError(
                f"option {required} is missing: format('changefeed') needs "
                ".option('connection', 'postgresql://...' or 'mssql://...') and "
                ".option('feed', 'schema.table')"
            )
    feed = str(lowered["feed"]).strip()
    if not _FEED.fullmatch(feed):
        raise ChangefeedSourceError(f"option feed must be written schema.table, got {feed!r}")
    raw_page = str(lowered.get("pagesize", DEFAULT_PAGE_SIZE)).strip()
    try:
        page_size = int(raw_page)
    except ValueError:
        page_size = 0
    if page_size < 1 or page_size >= 2**31:
        raise ChangefeedSourceError(f"option pageSize must be a positive integer, got {raw_page!r}")
    max_events = _positive(lowered, "maxeventspertrigger")
    min_events = _positive(lowered, "mineventspertrigger")
    raw_delay = lowered.get("maxtriggerdelay")
    delay = DEFAULT_TRIGGER_DELAY if raw_delay is None else parse_delay(str(raw_delay))
    if delay is None:
        raise ChangefeedSourceError(
            f"option maxTriggerDelay must be seconds or a number with ms, s, m or h (e.g. "
            f"15m), got {raw_delay!r}"
        )
    if raw_delay is not None and min_events is None:
        raise ChangefeedSourceError(
            "option maxTriggerDelay bounds the wait of minEventsPerTrigger: set that too, "
            "or remove it"
        )
    starting_offsets = (
        decode_offset(str(lowered["startingoffsets"]), what="startingOffsets")
        if "startingoffsets" in lowered
        else None
    )
    ending_offsets = (
        decode_offset(str(lowered["endingoffsets"]), what="endingOffsets")
        if "endingoffsets" in lowered
        else None
    )
    return FeedOptions(
        connection=parse_connection(
            str(lowered["connection"]), user=lowered.get("user"), password=lowered.get("password")
        ),
        feed=feed,
        shards=parse_shards(lowered.get("shards")),
        page_size=page_size,
        starting_position=parse_starting_position(lowered.get("startingposition")),
        starting_offsets=starting_offsets,
        ending_offsets=ending_offsets,
        payload=_flag(lowered, "payload", False),
        move_outbox=_flag(lowered, "moveoutbox", True),
        changefeed_schema=str(lowered.get("changefeedschema", "changefeed")).strip()
        or "changefeed",
        consumer=consumer_name(lowered.get("consumer")),
        max_events_per_trigger=max_events,
        min_events_per_trigger=min_events,
        max_trigger_delay=delay,
    )
