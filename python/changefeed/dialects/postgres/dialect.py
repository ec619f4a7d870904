"""PostgreSQL as a :class:`~changefeed.dialects.base.Dialect`: its parts are in this
package (the client in :mod:`.client`, the Spark source's reads in :mod:`.reads`, a
snapshot's statements in :mod:`.snapshot`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from changefeed.client.feed import FeedClient
from changefeed.dialects.base import Backend, Dialect, SnapshotStatements
from changefeed.dialects.feed import Connection
from changefeed.dialects.postgres.client import PostgresFeed, connect, registered_feeds


class PostgresDialect(Dialect):
    name = "postgres"
    title = "PostgreSQL"
    schemes = ("postgresql", "postgres")
    extra = "postgres"

    def connect(self, uri: str, *, password: str | None = None,
                application_name: str = "changefeed") -> Any:  # fmt: skip
        return connect(uri, application_name=application_name, password=password)

    def client(self, feed_id: str, schema: str = "changefeed") -> FeedClient:
        return PostgresFeed(feed_id, schema)

    def registered_feeds(self, conn: Any, schema: str = "changefeed") -> Mapping[str, str]:
        return registered_feeds(conn, schema)

    def permission_denied(self, exc: BaseException) -> bool:
        return type(exc).__name__ == "InsufficientPrivilege"  # psycopg.errors, by SQLSTATE 42501

    def reads(self, connection: Connection, changefeed_schema: str = "changefeed") -> Backend:
        # PyArrow is needed from here on only: the CLI picks a dialect without it.
        from changefeed.dialects.postgres.reads import PostgresBackend

        return PostgresBackend(connection, changefeed_schema)

    def snapshot(self) -> SnapshotStatements:
        from changefeed.dialects.postgres.snapshot import PostgresStatements

        return PostgresStatements()
