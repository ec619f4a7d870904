"""The feed's database behind a :class:`Backend`: one implementation per database
(PostgreSQL in :mod:`._postgres`, SQL Server in :mod:`._sqlserver`), chosen by the
connection's dialect. Above both, so the backends never import their factory."""

from __future__ import annotations

from changefeed.spark.source._backend import Backend, Connection
from changefeed.spark.source._errors import ChangefeedSourceError
from changefeed.spark.source._postgres import PostgresBackend
from changefeed.spark.source._sqlserver import SqlServerBackend

#: Each dialect of :func:`parse_connection` and its backend.
BACKENDS: dict[str, type[Backend]] = {"postgres": PostgresBackend, "sqlserver": SqlServerBackend}


def open_backend(connection: Connection, changefeed_schema: str = "changefeed") -> Backend:
    """Connect; an unreachable database raises :class:`ChangefeedSourceError` naming it."""
    backend = BACKENDS.get(connection.dialect)
    if backend is None:
        raise ChangefeedSourceError(
            f"no feed backend for a {connection.dialect!r} database; changefeed reads "
            f"{' and '.join(sorted(BACKENDS))} feeds"
        )
    return backend(connection, changefeed_schema)
