"""The databases changefeed feeds live in, one :class:`Dialect` each.

:data:`DIALECTS` lists them; :func:`dialect_named` and :func:`dialect_for_uri` choose one.
Each owns every statement sent to its database (``changefeed/dialects/<name>/``: the
client, the Spark source's reads, the snapshot's statements); see :mod:`.base` for the
interface.

>>> dialect_for_uri("postgresql://app@db/shop").name
'postgres'
>>> dialect_named("sqlserver").title
'SQL Server'
>>> parse_connection("mssql://sa:secret@db:1433/shop").display
'mssql://sa:***@db:1433/shop'
"""

from __future__ import annotations

import urllib.parse

from changefeed.client.core import redact
from changefeed.dialects.base import (
    MAX_MOVES,
    MOVE_ROWS,
    Backend,
    ChunkStatements,
    Dialect,
    SnapshotStatements,
)
from changefeed.dialects.feed import Connection, Row, SourceFeed
from changefeed.dialects.postgres import PostgresDialect
from changefeed.dialects.sqlserver import SqlServerDialect
from changefeed.errors import ChangefeedSourceError

#: Every database changefeed supports, by name.
DIALECTS: dict[str, Dialect] = {d.name: d for d in (PostgresDialect(), SqlServerDialect())}


def dialect_named(name: str) -> Dialect:
    """The dialect called ``name`` (``FeedInfo.dialect``, ``Connection.dialect``)."""
    found = DIALECTS.get(name)
    if found is None:
        raise ChangefeedSourceError(
            f"no dialect {name!r}: changefeed supports {' and '.join(sorted(DIALECTS))} feeds"
        )
    return found


def schemes() -> tuple[str, ...]:
    """Every URI scheme a connection may start with, in the order of :data:`DIALECTS`."""
    return tuple(scheme for dialect in DIALECTS.values() for scheme in dialect.schemes)


def dialect_for_uri(uri: str) -> Dialect:
    """The dialect a connection URI's scheme names; a libpq ``key=value`` string (no
    scheme) is PostgreSQL's. An unknown scheme raises :class:`ChangefeedSourceError`."""
    text = (uri or "").strip()
    if "://" not in text and "=" in text:
        return DIALECTS["postgres"]
    return _by_scheme(text)


def _by_scheme(text: str) -> Dialect:
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    for dialect in DIALECTS.values():
        if scheme in dialect.schemes:
            return dialect
    raise ChangefeedSourceError(
        f"connection {redact(text)!r} is not a supported URI: use "
        "postgresql://user:password@host:port/database (libpq form, also "
        "?host=/unix/socket/dir) or mssql://user:password@host:port/database"
    )


def parse_connection(
    uri: str, *, user: str | None = None, password: str | None = None
) -> Connection:
    """``postgresql://...`` (any libpq URI, also a Unix-socket ``?host=/dir``) or
    ``mssql://user:password@host:port/database`` (also ``sqlserver://``): the Spark
    source's ``connection`` option, which takes URIs only.

    ``user``/``password`` (the options of the same names) replace those of the URI, so a
    secret can stay out of the URI (Spark redacts an option named ``password``).
    """
    text = (uri or "").strip()
    dialect = _by_scheme(text)
    if user is not None or password is not None:
        parts = urllib.parse.urlsplit(text)
        name = user if user is not None else urllib.parse.unquote(parts.username or "")
        secret = password if password is not None else urllib.parse.unquote(parts.password or "")
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
        auth = urllib.parse.quote(name, safe="")
        if secret:
            auth += ":" + urllib.parse.quote(secret, safe="")
        text = urllib.parse.urlunsplit(
            (parts.scheme, f"{auth}@{host}", parts.path, parts.query, parts.fragment)
        )
    return Connection(dialect.name, text)


__all__ = [
    "DIALECTS",
    "MAX_MOVES",
    "MOVE_ROWS",
    "Backend",
    "ChunkStatements",
    "Connection",
    "Dialect",
    "PostgresDialect",
    "Row",
    "SnapshotStatements",
    "SourceFeed",
    "SqlServerDialect",
    "dialect_for_uri",
    "dialect_named",
    "parse_connection",
    "schemes",
]
