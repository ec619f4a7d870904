"""What every database's client shares: a feed's registry entry, quoting, redaction.

A feed's object names are read from the registry ``<schema>.feeds`` (never recomputed):
setup writes the names it generated (the long-name rule of protocol section 9 applied by
the dbt macros) into the registry's ``names`` column, so there is exactly one
implementation of the rule.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

ZERO_ULID = bytes(16)
"""The cursor for "from the beginning": 16 zero bytes, below every ULID."""


def quote_pg(name: str) -> str:
    """A PostgreSQL identifier, always quoted.

    >>> quote_pg('we"ird name')
    '"we""ird name"'
    """
    return '"' + name.replace('"', '""') + '"'


def quote_pg_literal(value: str) -> str:
    """A PostgreSQL string literal that does not depend on standard_conforming_strings.

    >>> quote_pg_literal("it's")
    "E'it''s'"
    """
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def quote_mssql(name: str) -> str:
    """A SQL Server identifier, always bracketed.

    >>> quote_mssql("odd]name")
    '[odd]]name]'
    """
    return "[" + name.replace("]", "]]") + "]"


#: The first half of every landing's writer lock key on PostgreSQL (the two-int form of the
#: advisory lock functions): the first four bytes of sha256("changefeed/land"). The
#: protocol's own advisory locks all use the one-bigint form, which PostgreSQL keeps apart
#: from the two-int form (``pg_locks.objsubid`` 1 against 2), so no feed lock can collide.
WRITER_LOCK_CLASS = -1133669543


def writer_lock_resource(table: str) -> str:
    """The name of the lock a landing holds on its Spark table ``table`` (its only writer,
    protocol 11 F4): ``changefeed/land/<database.table>``, lower-cased as Spark's catalog
    names are.

    >>> writer_lock_resource("Landing.Orders")
    'changefeed/land/landing.orders'
    """
    return "changefeed/land/" + table.strip().lower()


def writer_lock_key(table: str) -> tuple[int, int]:
    """The PostgreSQL advisory lock key of :func:`writer_lock_resource`: the pair
    (:data:`WRITER_LOCK_CLASS`, the first four bytes of the resource's sha256 as a signed
    int). Two tables share a key once in about four billion pairs; they would then refuse
    to land at the same time, never write into each other.

    >>> writer_lock_key("landing.orders") == writer_lock_key("LANDING.orders")
    True
    """
    digest = hashlib.sha256(writer_lock_resource(table).encode()).digest()
    return WRITER_LOCK_CLASS, int.from_bytes(digest[:4], "big", signed=True)


_PASSWORD_IN_URI = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@?#]*:)[^@/?#]*@", re.I)
_PASSWORD_IN_QUERY = re.compile(r"(?P<head>[?&]password=)[^&#]*", re.I)


def redact(uri: str) -> str:
    """A connection URI with its password replaced by ``***`` (for error messages).

    >>> redact("postgresql://app:s3cret@db:5432/shop?password=x&sslmode=require")
    'postgresql://app:***@db:5432/shop?password=***&sslmode=require'
    """
    text = _PASSWORD_IN_URI.sub(r"\g<head>***@", uri)
    return _PASSWORD_IN_QUERY.sub(r"\g<head>***", text)


@dataclass(frozen=True)
class KeyColumn:
    """One key column of the feed: its name, database type and non-default collation."""

    name: str
    data_type: str
    collation: str | None = None


@dataclass(frozen=True)
class FeedInfo:
    """A feed as registered: mode, key columns, object names and source table.

    The one description of a registry entry, for every database (``dialect``
    ``"postgres"`` or ``"sqlserver"``); picklable, so it travels in Spark partitions.
    ``protocol_version`` is ``None`` where it was not read (the SQL Server calls do not
    read it yet). ``source_schema``/``source_table`` default to the two parts of
    ``feed_id``.

    >>> info = FeedInfo("shop.orders", "changefeed", "blocking", (KeyColumn("id", "bigint"),),
    ...                 {"feed": "feed:shop.orders"}, 1)
    >>> info.q("feed"), info.source_table
    ('"changefeed"."feed:shop.orders"', 'orders')
    """

    feed_id: str
    schema: str
    mode: str
    keys: tuple[KeyColumn, ...]
    names: Mapping[str, str]
    protocol_version: int | None = None
    dialect: str = "postgres"
    source_schema: str = ""
    source_table: str = ""
    row_image: bool = False
    """Whether the feed was set up with ``row_image: true``: writers store the source row
    as of each event (protocol 9, O7)."""
    images: bool = False
    """Whether the feed's events may carry images: ``row_image`` is on now or was on once
    (switched off, the images already written stay, protocol 5.2); readers return them."""

    def __post_init__(self) -> None:
        schema, _, table = self.feed_id.partition(".")
        if not self.source_schema:
            object.__setattr__(self, "source_schema", schema)
        if not self.source_table:
            object.__setattr__(self, "source_table", table)

    def quote(self, name: str) -> str:
        """An identifier quoted for this feed's database."""
        return quote_mssql(name) if self.dialect == "sqlserver" else quote_pg(name)

    def name(self, kind: str) -> str:
        """The registry's name of the object of ``kind``; ``kind:<feed_id>`` (the name
        setup gives it whenever that fits) for an entry that does not list it."""
        return self.names.get(kind) or f"{kind}:{self.feed_id}"

    def q(self, kind: str) -> str:
        """The quoted, schema-qualified name of the object of ``kind`` (e.g. ``"lock"``)."""
        try:
            name = self.names[kind]
        except KeyError:
            raise KeyError(
                f"feed {self.feed_id} ({self.mode} mode) has no {kind!r} object; "
                f"it has: {', '.join(sorted(self.names))}"
            ) from None
        return f"{self.quote(self.schema)}.{self.quote(name)}"

    @property
    def source(self) -> str:
        """The quoted, schema-qualified source table."""
        return f"{self.quote(self.source_schema)}.{self.quote(self.source_table)}"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)
