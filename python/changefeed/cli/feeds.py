"""The database side shared by ``changefeed status`` and ``changefeed barrier``.

Connection arguments and connecting (PostgreSQL with psycopg 3, SQL Server with pymssql,
chosen by the URI's scheme), a feed's client and its shards, and ULID arguments. Nothing
here imports PySpark.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from changefeed.cli import CliError
from changefeed.client import (
    ChangefeedError,
    FeedNotFound,
    PostgresFeed,
    SqlServerFeed,
    redact,
    registered_feeds,
)
from changefeed.client import sqlserver as mssql
from changefeed.client.feed import FeedClient


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
    """A connection of either database and the feed client class of its dialect: the CLI
    asks the clients (:class:`~changefeed.client.PostgresFeed`,
    :class:`~changefeed.client.SqlServerFeed`), which own every statement."""

    def __init__(self, conn: Any, dialect: _Dialect, schema: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self.schema = schema

    def registered_feeds(self) -> Mapping[str, str]:
        """``feed_id -> mode``; :class:`CliError` when there is no registry."""
        try:
            return self.dialect.registered_feeds(self.conn, self.schema)
        except FeedNotFound:
            raise CliError(
                f"no feed is set up in this database (there is no {self.schema}.feeds "
                "registry): set one up with `dbt run-operation changefeed.setup_feed`, or "
                "check --changefeed-schema"
            ) from None
        except ChangefeedError as exc:
            raise CliError(f"{exc}") from None

    def feed_client(self, feed: str) -> Any:
        """The feed's client; an unknown feed raises :class:`CliError` listing the known ones."""
        client = self.dialect.client(feed, self.schema)
        try:
            client.info(self.conn)
        except ChangefeedError as exc:
            raise CliError(
                f"unknown feed: {exc}. Check --feed (written schema.table), or set the feed up "
                "with `dbt run-operation changefeed.setup_feed`"
            ) from None
        return client


@dataclass(frozen=True)
class _Dialect:
    """What the CLI needs of one database: a connection, its feed client class and the
    registry's listing."""

    connect: Callable[[str, str | None], Any]
    client: type[FeedClient]
    registered_feeds: Callable[[Any, str], Mapping[str, str]]


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[Database]:
    """An autocommit connection to the database the arguments name, by URI scheme."""
    uri = _resolve_uri(args)
    dialect = _DIALECTS[uri.split("://", 1)[0].lower() if "://" in uri else ""]
    conn = dialect.connect(uri, args.password)
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
    try:
        return mssql.connect(uri, application_name="changefeed-cli", password=password)
    except ChangefeedError as exc:
        raise CliError(
            f"{exc}. Check that the server is running and reachable and that --connection "
            "(or CHANGEFEED_CONNECTION) names it"
        ) from None


_POSTGRES = _Dialect(_connect_postgres, PostgresFeed, registered_feeds)
_SQLSERVER = _Dialect(_connect_sqlserver, SqlServerFeed, mssql.registered_feeds)
#: URI scheme (``""``: a libpq key=value string) -> its database.
_DIALECTS: dict[str, _Dialect] = {
    **{scheme: _POSTGRES for scheme in ("", *POSTGRES_SCHEMES)},
    **{scheme: _SQLSERVER for scheme in SQLSERVER_SCHEMES},
}


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
