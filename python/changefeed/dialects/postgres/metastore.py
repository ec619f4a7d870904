"""The shared catalog's Hive metastore, a schema in the catalog's own PostgreSQL
(:mod:`changefeed.local.catalog`): every statement changefeed sends to it. The catalog
module starts the server and creates the schema; :mod:`changefeed.local.catalog_tables`
reads a table's entry without Spark. Each function takes an autocommit psycopg connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from changefeed.client.core import quote_pg, quote_pg_literal

#: The key of the advisory lock held while one process creates the metastore's tables.
_SCHEMA_LOCK_KEY = "hashtext('changefeed.catalog.schema')"


def create_database(conn: Any, name: str) -> None:
    """Create the database ``name`` unless it exists (``conn`` on another database)."""
    exists = conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone()
    if not exists:
        conn.execute(f"create database {quote_pg(name)}")


def schema_created(conn: Any, marker: str) -> bool:
    """Whether the table ``marker``, created once the metastore's tables are, exists."""
    row = conn.execute(f"select to_regclass({quote_pg_literal(marker)}) is not null").fetchone()
    return bool(row and row[0])


def mark_schema_created(conn: Any, marker: str) -> None:
    conn.execute(f"create table {quote_pg(marker)} ()")


@contextlib.contextmanager
def schema_lock(conn: Any) -> Iterator[None]:
    """Held while one process creates the metastore's tables, so that two first Spark
    sessions never create the same tables at once (PostgreSQL fails the second)."""
    conn.execute(f"select pg_advisory_lock({_SCHEMA_LOCK_KEY})")
    try:
        yield
    finally:
        conn.execute(f"select pg_advisory_unlock({_SCHEMA_LOCK_KEY})")


def table_entry(conn: Any, database: str, name: str) -> tuple[Any, ...] | None:
    """``(table id, location, provider, path)`` of ``database.name``, None if it is not
    registered: the provider is Spark's ``spark.sql.sources.provider`` (None for a Hive
    table), the path the data source's ``path`` option."""
    row = conn.execute(
        'select t."TBL_ID", s."LOCATION", '
        '(select p."PARAM_VALUE" from "TABLE_PARAMS" as p where p."TBL_ID" = t."TBL_ID" '
        "and p.\"PARAM_KEY\" = 'spark.sql.sources.provider'), "
        '(select p."PARAM_VALUE" from "SERDE_PARAMS" as p where p."SERDE_ID" = s."SERDE_ID" '
        "and p.\"PARAM_KEY\" = 'path') "
        'from "TBLS" as t join "DBS" as d on d."DB_ID" = t."DB_ID" '
        'left join "SDS" as s on s."SD_ID" = t."SD_ID" '
        'where d."NAME" = %s and t."TBL_NAME" = %s',
        (database, name),
    ).fetchone()
    return None if row is None else tuple(row)


def table_params(conn: Any, table_id: int) -> dict[str, str]:
    """The table's properties (``TABLE_PARAMS``)."""
    rows = conn.execute(
        'select "PARAM_KEY", "PARAM_VALUE" from "TABLE_PARAMS" where "TBL_ID" = %s', (table_id,)
    ).fetchall()
    return {str(k): str(v) for k, v in rows}


def partitions(conn: Any, table_id: int) -> list[tuple[str, str]]:
    """``(partition name, location)`` of each of the table's partitions."""
    rows = conn.execute(
        'select p."PART_NAME", s."LOCATION" from "PARTITIONS" as p '
        'join "SDS" as s on s."SD_ID" = p."SD_ID" where p."TBL_ID" = %s',
        (table_id,),
    ).fetchall()
    return [(str(part), str(location)) for part, location in rows]
