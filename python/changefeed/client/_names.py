"""A feed's object names, read from the registry ``<schema>.feeds`` (never recomputed).

Setup writes the names it generated (the long-name rule of protocol section 9 applied by
the dbt macros) into the registry's ``names`` column; clients read them from there, so
there is exactly one implementation of the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from changefeed.client._errors import FeedNotFound, translate


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, always quoted.

    >>> quote_ident('we"ird name')
    '"we""ird name"'
    """
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A PostgreSQL string literal that does not depend on standard_conforming_strings.

    >>> quote_literal("it's")
    "E'it''s'"
    """
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass(frozen=True)
class KeyColumn:
    """One key column of the feed: its name, PostgreSQL type and non-default collation."""

    name: str
    data_type: str
    collation: str | None = None


@dataclass(frozen=True)
class FeedInfo:
    """A feed as registered: mode, key columns and object names.

    >>> info = FeedInfo("shop.orders", "changefeed", "blocking", (KeyColumn("id", "bigint"),),
    ...                 {"feed": "feed:shop.orders"}, 1)
    >>> info.q("feed")
    '"changefeed"."feed:shop.orders"'
    """

    feed_id: str
    schema: str
    mode: str
    keys: tuple[KeyColumn, ...]
    names: Mapping[str, str]
    protocol_version: int

    def q(self, kind: str) -> str:
        """The quoted, schema-qualified name of the object of ``kind`` (e.g. ``"lock"``)."""
        try:
            name = self.names[kind]
        except KeyError:
            raise KeyError(
                f"feed {self.feed_id} ({self.mode} mode) has no {kind!r} object; "
                f"it has: {', '.join(sorted(self.names))}"
            ) from None
        return f"{quote_ident(self.schema)}.{quote_ident(name)}"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)


def run(conn: Any, query: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Execute ``query`` in the connection's transaction or, if none is open, in its own.

    On an autocommit connection or inside an open transaction the statement just runs.
    On an idle non-autocommit connection it runs in a transaction that is committed
    here, so the connection is left idle as it was found. CF SQLSTATEs become
    :class:`~changefeed.client.ChangefeedError` subclasses.
    """
    import psycopg

    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    try:
        if not conn.autocommit and idle:
            with conn.transaction():
                cur = conn.execute(query, params)
                return list(cur.fetchall()) if cur.description else []
        cur = conn.execute(query, params)
        return list(cur.fetchall()) if cur.description else []
    except psycopg.Error as exc:
        translated = translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def load(conn: Any, feed_id: str, schema: str) -> FeedInfo:
    """Read one feed's registry row."""
    import psycopg

    registry = f"{quote_ident(schema)}.feeds"
    try:
        rows = run(
            conn,
            f"select mode, keys, names, protocol_version from {registry} where feed_id = %s",
            (feed_id,),
        )
    except psycopg.errors.UndefinedTable:
        raise FeedNotFound(
            f"there is no feed registry {registry}: no feed is set up in this database under the "
            f"changefeed schema {schema!r} (run `dbt run-operation changefeed.setup_feed`)"
        ) from None
    if not rows:
        known = [r[0] for r in run(conn, f"select feed_id from {registry} order by 1")]
        raise FeedNotFound(
            f"feed {feed_id!r} is not registered in {registry}; registered feeds: "
            f"{', '.join(known) or 'none'}"
        )
    mode, keys, names, version = rows[0]
    return FeedInfo(
        feed_id=feed_id,
        schema=schema,
        mode=str(mode),
        keys=tuple(
            KeyColumn(str(k["name"]), str(k["data_type"]), k.get("collation") or None) for k in keys
        ),
        names={str(k): str(v) for k, v in dict(names).items()},
        protocol_version=int(version),
    )
