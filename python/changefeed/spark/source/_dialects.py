"""The Spark source's reads on a feed's database: the dialect the connection names opens
them (:mod:`changefeed.dialects`)."""

from __future__ import annotations

from changefeed.dialects import Backend, Connection, dialect_named


def open_backend(connection: Connection, changefeed_schema: str = "changefeed") -> Backend:
    """Connect; an unreachable database raises :class:`ChangefeedSourceError` naming it."""
    return dialect_named(connection.dialect).reads(connection, changefeed_schema)
