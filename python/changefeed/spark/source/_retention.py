"""Retention on the Spark side (protocol 8.1): refuse a read that starts below a shard's
retention horizon, and register a reader's committed cursors so retention keeps what it
has not read.

The database refuses such a read too (``read_feed`` raises CF013), but inside a Spark
task, where the message arrives wrapped in pages of Spark's own; and a landing's probe
for new events reads the feed table directly, where nothing would refuse it. So the
driver checks before any task starts.
"""

from __future__ import annotations

from collections.abc import Mapping

from changefeed.dialects import Backend, SourceFeed
from changefeed.errors import ChangefeedSourceError
from changefeed.spark.source._positions import to_hex

#: The re-snapshot a landing needs (docs/operations.md, "A landing behind retention").
LANDING_FIX = (
    "Re-snapshot it: copy the source table again, land into a new table with "
    "startingPosition set to the feed's lowest safe point read before the copy, and "
    "forget_consumer this landing's name (docs/operations.md, Retention)"
)

#: The re-snapshot a format("changefeed") query needs.
SOURCE_FIX = (
    "Re-snapshot: copy the source table again and start a new query (a new checkpoint) "
    "from the feed's current safe point, startingPosition=now (docs/operations.md, Retention)"
)


def check_not_behind(
    backend: Backend,
    info: SourceFeed,
    cursors: Mapping[int, bytes],
    reader: str,
    fix: str,
) -> None:
    """Raise if a shard's cursor lies below the newest event retention removed there:
    reading on would skip the events between the two (C5)."""
    horizons = backend.horizons(info, sorted(cursors))
    behind = [s for s in sorted(cursors) if s in horizons and cursors[s] < horizons[s]]
    if not behind:
        return
    shard = behind[0]
    more = f" (and shard(s) {', '.join(map(str, behind[1:]))})" if len(behind) > 1 else ""
    raise ChangefeedSourceError(
        f"{reader} fell behind retention on feed {info.feed_id} shard {shard}{more}: its "
        f"cursor {to_hex(cursors[shard])} lies below {to_hex(horizons[shard])}, the newest "
        f"event retention removed, so it cannot continue without skipping events (CF013). "
        f"{fix}"
    )


def consumer_name(raw: str | None) -> str | None:
    """The ``consumer`` option: 1 to 200 characters, as ``save_cursor`` accepts."""
    if raw is None:
        return None
    name = str(raw).strip()
    if not 1 <= len(name) <= 200:
        raise ChangefeedSourceError(
            f"option consumer must be a name of 1 to 200 characters (the name retention and "
            f"changefeed status know this reader by), got {raw!r}"
        )
    return name
