"""PostgreSQL: every statement changefeed sends to it (psycopg 3)."""

from changefeed.dialects.postgres.dialect import PostgresDialect

__all__ = ["PostgresDialect"]
