"""The database side shared by ``changefeed status`` and ``changefeed barrier``.

Connection arguments and connecting (through the dialect the URI's scheme names,
:mod:`changefeed.dialects`), a feed's client, and ULID arguments. Nothing
here imports PySpark.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from changefeed.cli import CliError
from changefeed.client import ChangefeedError, FeedNotFound, redact
from changefeed.client.feed import FeedClient
from changefeed.dialects import Dialect, dialect_for_uri, schemes
from changefeed.errors import DriverMissing


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


class Database:
    """An open connection and the :class:`~changefeed.dialects.Dialect` of its database:
    the CLI asks the dialect's feed clients, which own every statement."""

    def __init__(self, conn: Any, dialect: Dialect, schema: str) -> None:
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

    def feed_client(self, feed: str) -> FeedClient:
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


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[Database]:
    """An autocommit connection to the database the arguments name, by URI scheme."""
    uri = _resolve_uri(args)
    dialect = dialect_for_uri(uri)
    try:
        conn = dialect.connect(uri, password=args.password, application_name="changefeed-cli")
    except DriverMissing as exc:
        raise CliError(str(exc)) from None
    except ChangefeedError as exc:
        raise CliError(
            f"{exc}. Check that the server is running and reachable and that --connection "
            "(or CHANGEFEED_CONNECTION) names it"
        ) from None
    try:
        yield Database(conn, dialect, args.changefeed_schema)
    finally:
        conn.close()


def _resolve_uri(args: argparse.Namespace) -> str:
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
    if scheme not in schemes():
        accepted = ", ".join(f"{s}://" for s in schemes())
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
