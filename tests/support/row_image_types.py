"""The row-image type matrix of tests/test_pg_row_images.py and tests/test_spark_row_images.py:
one source table with a column for each kind of value that strict JSON cannot spell
(infinities, NaN) or that JSON has no type for (numerics beyond a double, bytes, time
zones, intervals, arrays, composite and domain values), a few rows, written the same way
through both writer paths: a blocking writer passing each row as the client read it
(``insert_events(images=...)``), and ``capture: trigger`` (``to_jsonb`` in the trigger).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.composite import CompositeInfo, register_composite
from tests.support.pg_feeds import create_table, setup_feed, teardown_feed

from changefeed.client import PostgresFeed

#: Blocking writer with images, and capture: trigger with images, of the same rows.
TABLES = {"typed_client": "blocking", "typed_capture": "outbox"}
COLUMNS = (
    "id bigint primary key, f8 double precision, f4 real, big numeric, wide numeric(40,5), "
    "amount numeric(12,2), bin bytea, tstz timestamptz, ts timestamp, tt timetz, iv interval, "
    "ints integer[], grid integer[], nums numeric[], stamps timestamptz[], texts text[], "
    "pair {schema}.pair, dom {schema}.positive, doc jsonb, u uuid, note text"
)
#: The values of each write, as SQL (one row per write; an update sets the columns named).
INSERTS = [
    "1, 1.5, 0.1, 123456789012345678901234567890.1234567890, "
    "1234567890123456789012345678901234.56789, 12.34, '\\x00ff10', "
    "'2024-06-01 12:00:00.5+05:30', '2024-01-02 03:04:05.000006', '12:00:00.25+05:30', "
    "'1 day 02:00:00.25', '{1,NULL,3}', '{{1,2},{3,4}}', '{1.5,NaN,-Infinity}', "
    '\'{"2024-01-01 00:00:00+00","1950-06-01 12:00:00+00"}\', \'{"a\\"b",NULL,é}\', '
    'row(1, \'x"y\'), 5.50, \'{"k": [1, "x", null, 1e30]}\', '
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', E'quote \" back \\\\ newline \\n é'",
    "2, 'Infinity', '-Infinity', 'NaN', -99999999999999999999999999999999999.99999, -0.01, "
    "'\\x', '1950-06-01 12:00:00 Africa/Monrovia', '0099-12-31 23:59:59', "
    "'23:59:59-00:44:30', '-1 days +02:00:00', '{}', '{}', '{}', '{}', '{}', row(null, null), "
    "0.01, '[null]', null, ''",
    "3, 'NaN', 'NaN', 'Infinity', null, null, null, null, null, null, null, null, null, "
    "null, null, null, null, null, null, null, null",
]
UPDATES = ["f8 = '-Infinity', big = '-Infinity', tstz = '2000-01-01 00:00:00+14' where id = 1"]
#: The session time zone of the writes: its offset in 1950 has seconds (-00:44:30).
TIME_ZONE = "Africa/Monrovia"


def create(dbt: Any, conn: psycopg.Connection[Any], schema: str) -> None:
    """The composite and domain types, both source tables and their feeds."""
    for table in TABLES:
        teardown_feed(dbt, schema, table)
        conn.execute(sql.SQL("drop table if exists {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table)))  # fmt: skip
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
    for ddl in ("drop type if exists {}.pair", "drop domain if exists {}.positive",
                "create type {}.pair as (a integer, b text)",
                "create domain {}.positive as numeric(10,2) check (value > 0)"):  # fmt: skip
        conn.execute(sql.SQL(ddl).format(sql.Identifier(schema)))
    for table, mode in TABLES.items():
        create_table(conn, schema, table, COLUMNS.format(schema=schema))
        capture = {"capture": "trigger"} if mode == "outbox" else {}
        setup_feed(dbt, schema, table, mode, row_image=True, **capture)


def write(uri: str, schema: str) -> None:
    """Every insert and update, one transaction each, to both tables. The blocking writer
    passes the row as its statement returned it (the composite registered, so psycopg
    gives it as a named tuple)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("select pg_catalog.set_config('timezone', %s, false)", (TIME_ZONE,))
        register_composite(CompositeInfo.fetch(conn, f"{schema}.pair"), conn)
        statements = [("insert into ", " values (" + v + ") returning *") for v in INSERTS]
        statements += [("update ", " set " + u + " returning *") for u in UPDATES]
        for verb, rest in statements:
            for table, mode in TABLES.items():
                # Composed, not formatted: the values have braces of their own.
                query = sql.SQL(verb) + sql.Identifier(schema, table) + sql.SQL(rest)
                if mode == "outbox":
                    conn.execute(query)
                    continue
                with PostgresFeed(f"{schema}.{table}").write(conn, 0) as w:
                    with conn.cursor(row_factory=dict_row) as cur:
                        row = cur.execute(query).fetchone()
                    assert row is not None
                    w.insert_events([(row["id"],)], images=[row])
        PostgresFeed(f"{schema}.typed_capture").move_outbox(conn, 0)
