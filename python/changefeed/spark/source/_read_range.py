"""The read loop every dialect shares: a shard's events between two positions, page by
page, through the dialect's :class:`~changefeed.dialects.Backend`."""

from __future__ import annotations

from collections.abc import Iterator

from changefeed.client.core import ZERO_ULID
from changefeed.dialects import Backend, Row, SourceFeed
from changefeed.errors import ChangefeedSourceError
from changefeed.spark.source._positions import to_hex


def read_range(
    backend: Backend, info: SourceFeed, shard: int, start: bytes, end: bytes, page_size: int
) -> Iterator[list[Row]]:
    """Every event of ``shard`` with ``start < ulid <= end``, page by page, in ULID order.

    ``end`` must be a safe point observed earlier (or below one): everything at or below
    it is committed and immutable (S1, C3), so this returns the same rows whenever it
    runs. Pages end at transaction boundaries (``read_feed``); ``end`` is a safe point,
    itself the last ULID of a block, so cutting a page at ``end`` never splits one.
    """
    cursor = start
    while cursor < end:
        page = backend.read_page(info, shard, cursor, page_size)
        if not page:
            # read_feed stops at the safe point of its own snapshot. It can only be below
            # `end` if the feed went backwards (re-created, restored): never return a
            # silently short range.
            now = backend.safe_points(info, [shard]).get(shard, ZERO_ULID)
            if now < end:
                raise ChangefeedSourceError(
                    f"feed {info.feed_id} shard {shard}: the safe point is now {to_hex(now)}, "
                    f"below {to_hex(end)} that this read was planned up to (was the feed "
                    "torn down and set up again?); nothing is read past a safe point"
                )
            return
        first, last = bytes(page[0][1]), bytes(page[-1][1])
        if first <= cursor:
            raise ChangefeedSourceError(
                f"feed {info.feed_id} shard {shard}: read_feed returned {to_hex(first)}, "
                f"not after the cursor {to_hex(cursor)}"
            )
        if last > end:
            kept = [row for row in page if bytes(row[1]) <= end]
            if kept:
                yield kept
            return
        yield page
        cursor = last
