"""The database side shared by ``changefeed status`` and ``changefeed barrier``.

Connection arguments and connecting (PostgreSQL with psycopg 3, SQL Server with pymssql,
chosen by the URI's scheme), a feed's client and its shards, and ULID arguments. Nothing
here imports PySpark.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from changefeed.cli import CliError
from changefeed.client import redact
from changefeed.client.core import quote_pg


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connection",
        default=os.environ.get("CHANGEFEED_CONNECTION"),
        help="postgresql://user@host:port/database (libpq URI, also ?host=/socket/dir) or "
        "mssql://user@host:1433/database (also sqlserver://); default from "
        "CHANGEFEED_CONNECTION",
    )
    parser.add_argument(
        "--password",
        default=os.environ.get("CHANGEFEED_PASSWORD"),
        help="database password (default: CHANGEFEED_PASSWORD)",
    )
    parser.add_argument(
        "--changefeed-schema",
        default="changefeed",
        help="the schema of the feeds' objects (default changefeed)",
    )


#: The URI schemes ``--connection`` accepts, by database.
POSTGRES_SCHEMES = ("postgresql", "postgres")
SQLSERVER_SCHEMES = ("mssql", "sqlserver")


class Database:
    """A connection of either database, with the few statements the CLI needs beyond the
    feed clients' API (their text lives in the clients' modules)."""

    def __init__(self, conn: Any, dialect: str, schema: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self.schema = schema

    def registered_feeds(self) -> Mapping[str, str]:
        """``feed_id -> mode``; :class:`CliError` when there is no registry."""
        from changefeed.client import ChangefeedError, registered_feeds
        from changefeed.client import sqlserver as mssql

        missing = CliError(
            f"no feed is set up in this database (there is no {self.schema}.feeds "
            "registry): set one up with `dbt run-operation changefeed.setup_feed`, or check "
            "--changefeed-schema"
        )
        try:
            if self.dialect == "sqlserver":
                return mssql.registered_feeds(self.conn, self.schema)
            return registered_feeds(self.conn, self.schema)
        except ChangefeedError as exc:
            raise CliError(f"{exc}") from None
        except Exception as exc:
            if type(exc).__name__ == "UndefinedTable" or mssql.error_number(exc) == 208:
                raise missing from None
            raise

    def feed_client(self, feed: str) -> Any:
        """The feed's client; an unknown feed raises :class:`CliError` listing the known ones."""
        from changefeed.client import ChangefeedError, PostgresFeed, SqlServerFeed

        cls = SqlServerFeed if self.dialect == "sqlserver" else PostgresFeed
        client = cls(feed, self.schema)
        try:
            client.info(self.conn)
        except ChangefeedError as exc:
            raise CliError(
                f"unknown feed: {exc}. Check --feed (written schema.table), or set the feed up "
                "with `dbt run-operation changefeed.setup_feed`"
            ) from None
        return client

    def shards(self, client: Any) -> list[int]:
        """Shards with a state row, and in outbox mode shards with unmoved outbox rows."""
        if self.dialect == "sqlserver":
            return list(client.shards(self.conn))
        info = client.info(self.conn)
        sql = f"select shard_id from {info.q('state')}"
        if info.mode == "outbox":
            sql += f" union select shard_id from {info.q('outbox')}"
        rows = self.conn.execute(f"select distinct shard_id from ({sql}) as s order by 1")
        return [int(r[0]) for r in rows.fetchall()]

    def outbox_rows(self, client: Any, shard: int) -> int | None:
        """Rows of ``shard`` waiting in the outbox (outbox mode); ``None`` where the user
        may not read the outbox (SQL Server's reader role)."""
        info = client.info(self.conn)
        if self.dialect == "sqlserver":
            from changefeed.client import sqlserver as mssql

            return mssql.outbox_rows(self.conn, info, shard)
        sql = f"select count(*) from {info.q('outbox')} where shard_id = %s"
        return int(self.conn.execute(sql, (shard,)).fetchone()[0])

    def capture_state(self, client: Any) -> tuple[str, bool | None]:
        """The feed's capture (``trigger`` or ``none``) and, with ``capture: trigger``,
        whether its source lost its triggers: the test ``move_outbox`` raises CF011 for
        (the source table exists and fewer than its four triggers are there and enabled).
        On SQL Server what ``capture_check`` (which ``read_feed`` calls) says, 51068."""
        info = client.info(self.conn)
        if self.dialect == "sqlserver":
            from changefeed.client import sqlserver as mssql

            return mssql.capture_state(self.conn, info)
        kinds = ("capture_insert", "capture_update", "capture_delete", "capture_truncate")
        row = self.conn.execute(
            f"""select f.options ->> 'capture',
                       (select count(*) from pg_catalog.pg_trigger as t
                         where t.tgrelid = s.oid and t.tgenabled <> 'D'
                           and t.tgname = any (%s::text[])),
                       s.oid is not null
                  from {quote_pg(self.schema)}.feeds as f
                  left join lateral (select pg_catalog.to_regclass(
                      pg_catalog.quote_ident(f.source_schema) || '.'
                      || pg_catalog.quote_ident(f.source_table)) as oid) as s on true
                 where f.feed_id = %s""",
            ([info.names.get(k, "") for k in kinds], client.feed_id),
        ).fetchone()
        if row is None or row[0] != "trigger":
            return "none", None
        return "trigger", bool(row[2]) and int(row[1]) < len(kinds)

    def oldest_pending_age(self, client: Any, shard: int) -> float | None:
        """Seconds since the shard's oldest pending write started (0.0 when none), by the
        database's clock; ``None`` where the user may not read the session table (the
        reader role on PostgreSQL; on SQL Server ``safe_point`` reports it, which the
        reader role may call)."""
        info = client.info(self.conn)
        if self.dialect == "sqlserver":
            from changefeed.client import sqlserver as mssql

            return mssql.oldest_pending_age(self.conn, info, shard)
        import psycopg

        try:
            row = self.conn.execute(
                "select coalesce(extract(epoch from pg_catalog.clock_timestamp() "
                f"- pg_catalog.min(se.started_at)), 0) from {info.q('session')} as se "
                "where se.shard_id = %s and se.state = 0",
                (shard,),
            ).fetchone()
        except psycopg.errors.InsufficientPrivilege:
            return None
        return round(max(0.0, float(row[0])), 3)

    def retention_horizon(self, client: Any, shard: int) -> bytes | None:
        """The newest ULID retention removed from ``shard`` (readers with a cursor below it
        fail), or ``None`` when retention never removed anything there."""
        return client.retention_horizon(self.conn, shard)  # type: ignore[no-any-return]

    def registered_cursors(self, client: Any) -> list[tuple[str, int, bytes]]:
        """Cursors consumers registered for retention (``save_cursor``), as
        ``(consumer, shard, cursor)``."""
        return client.consumers(self.conn)  # type: ignore[no-any-return]

    def unread(
        self, client: Any, shard: int, after: bytes, upto: bytes
    ) -> tuple[int, bytes | None]:
        """How many events of ``shard`` lie in ``(after, upto]``, and the first one's ULID."""
        info = client.info(self.conn)
        if self.dialect == "sqlserver":
            from changefeed.client import sqlserver as mssql

            return mssql.unread(self.conn, info, shard, after, upto)
        window = "where shard_id = %s and ulid > %s and ulid <= %s"
        row = self.conn.execute(
            f"select (select count(*) from {info.q('feed')} {window}), "
            f"(select ulid from {info.q('feed')} {window} order by ulid limit 1)",
            (shard, after, upto, shard, after, upto),
        ).fetchone()
        return int(row[0]), None if row[1] is None else bytes(row[1])


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[Database]:
    """An autocommit connection to the database the arguments name, by URI scheme."""
    uri = _resolve_uri(args)
    if uri.split("://", 1)[0].lower() in SQLSERVER_SCHEMES:
        conn, dialect = _connect_sqlserver(uri, args.password), "sqlserver"
    else:
        conn, dialect = _connect_postgres(uri, args.password), "postgres"
    try:
        yield Database(conn, dialect, args.changefeed_schema)
    finally:
        conn.close()


def _connect_postgres(uri: str, password: str | None) -> Any:
    try:
        import psycopg
    except ImportError:
        raise CliError(
            "psycopg is not installed; install the PostgreSQL extra: "
            "pip install 'changefeed[postgres]'"
        ) from None
    extra: dict[str, Any] = {} if "connect_timeout" in uri else {"connect_timeout": 10}
    if password:
        extra["password"] = password
    try:
        return psycopg.connect(uri, autocommit=True, application_name="changefeed-cli", **extra)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(
            f"cannot connect to PostgreSQL at {redact(uri)}: {reason}. Check that the server "
            "is running and reachable and that --connection (or CHANGEFEED_CONNECTION) names "
            "it"
        ) from None


def _connect_sqlserver(uri: str, password: str | None) -> Any:
    from changefeed.client import ChangefeedError
    from changefeed.client import sqlserver as mssql

    try:
        return mssql.connect(uri, application_name="changefeed-cli", password=password)
    except ChangefeedError as exc:
        raise CliError(
            f"{exc}. Check that the server is running and reachable and that --connection "
            "(or CHANGEFEED_CONNECTION) names it"
        ) from None


def _resolve_uri(args: argparse.Namespace) -> str:
    accepted = ", ".join(f"{s}://" for s in (*POSTGRES_SCHEMES, *SQLSERVER_SCHEMES))
    if not args.connection:
        raise CliError(
            "no database given: pass --connection postgresql://user@host/database or "
            "mssql://user@host:1433/database (or set CHANGEFEED_CONNECTION)"
        )
    text = str(args.connection).strip()
    if "://" not in text:
        if "=" in text:
            return text  # a libpq key=value connection string
        raise CliError(
            f"--connection {text!r} is not a connection URI; write "
            "postgresql://user@host:port/database or mssql://user@host:1433/database"
        )
    scheme = text.split("://", 1)[0].lower()
    if scheme not in (*POSTGRES_SCHEMES, *SQLSERVER_SCHEMES):
        raise CliError(
            f"--connection {redact(text)}: unsupported scheme {scheme}://; accepted: {accepted}"
        )
    return text


def parse_ulid_arg(text: str, what: str) -> bytes:
    """A ULID from 26 Crockford base32 characters or 32 hex digits, with a clear error.

    >>> parse_ulid_arg("01ARZ3NDEKTSV4RRFFQ69G5FAV", "--position").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    >>> parse_ulid_arg("01563e3ab5d3d6764c61efb99302bd5b", "--position").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    """
    from changefeed.ulid import InvalidULID, parse_one

    try:
        return parse_one(text)
    except InvalidULID as exc:
        raise CliError(
            f"{what} {text!r} is not a valid ULID: {exc.reason}. A ULID is 26 characters of "
            "Crockford base32 (0-9 and A-Z without I, L, O, U; first character 0-7), e.g. "
            "01ARZ3NDEKTSV4RRFFQ69G5FAV, or 32 hex digits"
        ) from None
