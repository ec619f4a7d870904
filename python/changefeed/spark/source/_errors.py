"""The one error type of the feed data source and the landing."""

from __future__ import annotations

from changefeed.errors import ChangefeedError


class ChangefeedSourceError(ChangefeedError, ValueError):
    """A feed cannot be read as asked; the message names the cause and the fix.

    Raised for a missing or bad option, an unknown feed, a bad ULID or offset, and an
    unreachable database. Inside Spark it reaches the user wrapped in Spark's own
    exception, with this message in its text.
    """
