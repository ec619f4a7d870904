"""SQL Server as a :class:`~changefeed.dialects.base.Dialect`: its parts are in this
package (the client in :mod:`.client`, the Spark source's reads in :mod:`.reads`, a
snapshot's statements in :mod:`.snapshot`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from changefeed.client.feed import FeedClient
from changefeed.dialects.base import Backend, Dialect, SnapshotStatements
from changefeed.dialects.feed import Connection
from changefeed.dialects.sqlserver.client import (
    PERMISSION_DENIED,
    SqlServerFeed,
    connect,
    error_number,
    registered_feeds,
)


class SqlServerDialect(Dialect):
    name = "sqlserver"
    title = "SQL Server"
    schemes = ("mssql", "sqlserver")
    extra = "sqlserver"

    def connect(self, uri: str, *, password: str | None = None,
                application_name: str = "changefeed") -> Any:  # fmt: skip
        return connect(uri, application_name=application_name, password=password)

    def client(self, feed_id: str, schema: str = "changefeed") -> FeedClient:
        return SqlServerFeed(feed_id, schema)

    def registered_feeds(self, conn: Any, schema: str = "changefeed") -> Mapping[str, str]:
        return registered_feeds(conn, schema)

    def permission_denied(self, exc: BaseException) -> bool:
        return error_number(exc) == PERMISSION_DENIED

    def reads(self, connection: Connection, changefeed_schema: str = "changefeed") -> Backend:
        # PyArrow is needed from here on only: the CLI picks a dialect without it.
        from changefeed.dialects.sqlserver.reads import SqlServerBackend

        return SqlServerBackend(connection, changefeed_schema)

    def snapshot(self) -> SnapshotStatements:
        from changefeed.dialects.sqlserver.snapshot import SqlServerStatements

        return SqlServerStatements()
