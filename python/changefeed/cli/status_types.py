"""What ``changefeed status`` reports, one record per feed, shard and consumer: the rows
of its text, its JSON and its Prometheus exposition (:mod:`.metrics`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FeedStatus:
    feed: str
    mode: str
    capture: str
    capture_lost: bool | None
    """With ``capture: trigger``: whether the source lost its triggers (CF011); else None."""


@dataclass
class ShardStatus:
    feed: str
    mode: str
    shard: int
    head: str | None
    head_time: str | None
    safe_point: str | None
    pending: int
    outbox: int | None
    oldest_pending_age_s: float | None = None
    """None where the user may not read the session table (PostgreSQL's reader role)."""
    retention_horizon: str | None = None
    """The newest ULID retention removed from the shard (readers below it fail)."""
    head_unix: float | None = None
    safe_point_unix: float | None = None
    retention_horizon_unix: float | None = None


@dataclass
class ConsumerLag:
    consumer: str
    feed: str
    shard: int
    cursor: str | None
    lag_events: int
    oldest_unread_age_s: float | None
    behind_retention: bool = False
