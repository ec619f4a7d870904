"""SQL Server: every statement changefeed sends to it (pymssql)."""

from changefeed.dialects.sqlserver.dialect import SqlServerDialect

__all__ = ["SqlServerDialect"]
