"""The database side shared by ``changefeed status`` and ``changefeed barrier``.

Connection arguments and connecting (PostgreSQL, psycopg 3), a feed's client and its
shards, and ULID arguments. Nothing here imports PySpark.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from changefeed.cli import CliError
from changefeed.client import redact


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connection",
        default=os.environ.get("CHANGEFEED_CONNECTION"),
        help="postgresql://user@host:port/database (libpq URI, also "
        "?host=/socket/dir); default from CHANGEFEED_CONNECTION",
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


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[Any]:
    """An autocommit psycopg connection to the database the arguments name."""
    try:
        import psycopg
    except ImportError:
        raise CliError(
            "psycopg is not installed; install the PostgreSQL extra: "
            "pip install 'changefeed[postgres]'"
        ) from None
    uri = _resolve_uri(args)
    extra: dict[str, Any] = {} if "connect_timeout" in uri else {"connect_timeout": 10}
    if args.password:
        extra["password"] = args.password
    try:
        conn = psycopg.connect(uri, autocommit=True, application_name="changefeed-cli", **extra)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(
            f"cannot connect to PostgreSQL at {redact(uri)}: {reason}. Check that the server "
            "is running and reachable and that --connection (or CHANGEFEED_CONNECTION) names "
            "it"
        ) from None
    try:
        yield conn
    finally:
        conn.close()


def _resolve_uri(args: argparse.Namespace) -> str:
    if not args.connection:
        raise CliError(
            "no database given: pass --connection postgresql://user@host/database (or set "
            "CHANGEFEED_CONNECTION)"
        )
    text = str(args.connection).strip()
    if text.split("://", 1)[0].lower() in ("mssql", "sqlserver"):
        raise CliError(
            "this command supports PostgreSQL feeds only for now; on SQL Server exec the "
            "feed's procedures directly (docs/sqlserver.md), e.g. "
            "exec changefeed.[safe_point:shop.orders] @shard_id = 0"
        )
    if "://" not in text and "=" not in text:
        raise CliError(
            f"--connection {text!r} is not a connection URI; write "
            "postgresql://user@host:port/database"
        )
    return text


def parse_ulid_arg(text: str, what: str) -> bytes:
    """A ULID from 26 Crockford base32 characters or 32 hex digits, with a clear error.

    >>> parse_ulid_arg("01ARZ3NDEKTSV4RRFFQ69G5FAV", "--position").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    >>> parse_ulid_arg("01563e3ab5d3d6764c61efb99302bd5b", "--position").hex()
    '01563e3ab5d3d6764c61efb99302bd5b'
    """
    from changefeed.ulid import InvalidULID, decode_one

    value = text.strip()
    if len(value) == 32:
        try:
            return bytes.fromhex(value)
        except ValueError:
            pass
    try:
        return decode_one(value)
    except InvalidULID as exc:
        raise CliError(
            f"{what} {text!r} is not a valid ULID: {exc.reason}. A ULID is 26 characters of "
            "Crockford base32 (0-9 and A-Z without I, L, O, U; first character 0-7), e.g. "
            "01ARZ3NDEKTSV4RRFFQ69G5FAV, or 32 hex digits"
        ) from None


def ulid_text(value: bytes) -> str:
    from changefeed.ulid import encode_one

    return encode_one(value)


def ulid_time(value: bytes) -> datetime:
    return datetime.fromtimestamp(int.from_bytes(value[:6], "big") / 1000, timezone.utc)


def feed_client(conn: Any, feed: str, schema: str) -> Any:
    """The feed's client; an unknown feed raises :class:`CliError` listing the known ones."""
    from changefeed.client import ChangefeedError, PostgresFeed

    client = PostgresFeed(feed, schema)
    try:
        client.info(conn)
    except ChangefeedError as exc:
        raise CliError(
            f"unknown feed: {exc}. Check --feed (written schema.table), or set the feed up "
            "with `dbt run-operation changefeed.setup_feed`"
        ) from None
    return client


def feed_shards(conn: Any, client: Any) -> list[int]:
    """Shards with a state row, and in outbox mode shards with unmoved outbox rows."""
    info = client.info(conn)
    sql = f"select shard_id from {info.q('state')}"
    if info.mode == "outbox":
        sql += f" union select shard_id from {info.q('outbox')}"
    rows = conn.execute(f"select distinct shard_id from ({sql}) as s order by 1").fetchall()
    return [int(r[0]) for r in rows]
