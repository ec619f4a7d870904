"""What every database's client shares: a feed's registry entry, quoting, redaction.

A feed's object names are read from the registry ``<schema>.feeds`` (never recomputed):
setup writes the names it generated (the long-name rule of protocol section 9 applied by
the dbt macros) into the registry's ``names`` column, so there is exactly one
implementation of the rule.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

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


def jsonb_text(
    value: Any, *, separators: tuple[str, str] = (", ", ": "), sort_keys: bool = False
) -> str:
    r"""JSON text of a value as PostgreSQL's ``to_jsonb`` spells it for the column the driver
    read it from, so a row image a client builds reads back (``jsonb_populate_record``)
    as the value it was, and equals the capture's ``to_jsonb`` of the same row (protocol
    5.2): non-finite floats and decimals as the strings ``"Infinity"``, ``"-Infinity"``
    and ``"NaN"`` (strict JSON has no such numbers), decimals as exact numbers, bytes as
    ``"\\x<hex>"``, dates and times in ISO 8601 with the fraction and the offset as
    PostgreSQL writes them, ``timedelta`` in interval output form, named tuples
    (composite values) as objects, lists and tuples (arrays) as arrays. Other values
    (UUIDs, addresses, ...) are their ``str``; an ``Enum`` member is its name (psycopg's
    enum label).

    >>> jsonb_text({"x": float("inf"), "n": Decimal("1E+2"), "b": b"\x01"})
    '{"x": "Infinity", "n": 100, "b": "\\\\x01"}'
    """
    comma, colon = separators

    def encode(item: Any) -> str:
        if item is None:
            return "null"
        if item is True or item is False:
            return "true" if item else "false"
        if isinstance(item, enum.Enum):
            return json.dumps(item.name)
        if isinstance(item, int):
            return int.__repr__(item)
        if isinstance(item, float):
            if math.isfinite(item):
                return float.__repr__(item)
            return '"NaN"' if math.isnan(item) else ('"Infinity"' if item > 0 else '"-Infinity"')
        if isinstance(item, Decimal):
            if item.is_nan():
                return '"NaN"'
            if item.is_infinite():
                return '"-Infinity"' if item.is_signed() else '"Infinity"'
            return format(item, "f")
        if isinstance(item, str):
            return json.dumps(item)
        if isinstance(item, (bytes, bytearray, memoryview)):
            return '"\\\\x' + bytes(item).hex() + '"'
        if isinstance(item, (datetime, time)):
            return '"' + _pg_clock(item) + '"'
        if isinstance(item, date):
            return '"' + item.isoformat() + '"'
        if isinstance(item, timedelta):
            return '"' + _pg_interval(item) + '"'
        if hasattr(item, "_asdict"):  # a named tuple: psycopg's composite values
            item = item._asdict()
        if isinstance(item, Mapping):
            pairs = [(k if isinstance(k, str) else str(k), v) for k, v in item.items()]
            if sort_keys:
                pairs.sort(key=lambda pair: pair[0])
            return "{" + comma.join(json.dumps(k) + colon + encode(v) for k, v in pairs) + "}"
        if isinstance(item, (list, tuple)):
            return "[" + comma.join(encode(v) for v in item) + "]"
        return json.dumps(str(item))

    return encode(value)


def _fraction(microsecond: int) -> str:
    """PostgreSQL's fractional seconds: none when zero, else without trailing zeros."""
    return f".{microsecond:06d}".rstrip("0") if microsecond else ""


def _pg_clock(value: datetime | time) -> str:
    """``to_jsonb``'s timestamp[tz] (``T`` separator, offset ``+hh:mm``) and time[tz]
    (offset ``+hh`` when on the hour); a seconds part of the offset when it has one."""
    text = value.replace(microsecond=0, tzinfo=None).isoformat() + _fraction(value.microsecond)
    offset = value.utcoffset()
    if offset is None:
        return text
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    text += f"{sign}{hours:02d}"
    if minutes or seconds or isinstance(value, datetime):
        text += f":{minutes:02d}"
    return text + (f":{seconds:02d}" if seconds else "")


def _pg_interval(value: timedelta) -> str:
    """An interval in PostgreSQL's output style (``1 day 02:00:00``, ``-1 days +02:00:00``)."""
    days, clock = value.days, value.seconds
    parts = [f"{days} {'day' if days == 1 else 'days'}"] if days else []
    if clock or value.microseconds or not days:
        hours, rest = divmod(clock, 3600)
        sign = "+" if days < 0 else ""
        parts.append(
            f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}" + _fraction(value.microseconds)
        )
    return " ".join(parts)


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
