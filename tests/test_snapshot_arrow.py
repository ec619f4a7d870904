"""The direct Arrow read of snapshot chunks (``changefeed.dialects.postgres.snapshot_arrow``,
ADBC) on a real
PostgreSQL: for every column type it takes, it gives the same Arrow values as the row
path (psycopg rows converted as every read of a feed converts them), nulls and edge
values included; it refuses dates it cannot carry, and it leaves the feeds and databases
it does not cover to the row path. No Spark session: the arrays are compared directly.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from changefeed.dialects.postgres import snapshot_arrow
from changefeed.dialects.rows import Column
from changefeed.spark.source import BatchBuilder, ChangefeedSourceError, RowLayout

pytestmark = [pytest.mark.postgres]

SCHEMA = "snapshot_arrow"

#: (column, declared type, SQL of the edge values: one row each, in order)
COLUMNS = [
    ("i2", "smallint", ["-32768", "32767", "0"]),
    ("i4", "integer", ["-2147483648", "2147483647", "null"]),
    ("i8", "bigint", ["-9223372036854775808", "9223372036854775807", "7"]),
    ("f4", "real", ["'NaN'", "'-Infinity'", "1.5e-38"]),
    ("f8", "double precision", ["'Infinity'", "-0.0", "2.2250738585072014e-308"]),
    ("b", "boolean", ["true", "false", "null"]),
    ("d", "date", ["'0001-01-01'", "'9999-12-31'", "'2024-02-29'"]),
    ("ts", "timestamp(3)", ["'0001-01-01 00:00:00'", "'9999-12-31 23:59:59.999'", "null"]),
    ("tz", "timestamptz", ["'2024-03-31 02:30:00.123456+02'", "'1969-12-31 23:59:59.999999Z'",
                           "'9999-12-31 23:59:59.999999+00'"]),
    ("t", "text", ["''", "'é 日本 \U0001f600'", "null"]),
    ("vc", "varchar(5)", ["'ab'", "'x''y'", "''"]),
    ("c", "char(4)", ["'ab'", "null", "'abcd'"]),
    ("by", "bytea", ["'\\x00ff00'::bytea", "''::bytea", "null"]),
]


@pytest.fixture(scope="module")
def table(admin: Any) -> Iterator[str]:
    admin.execute(f"drop schema if exists {SCHEMA} cascade")
    admin.execute(f"create schema {SCHEMA}")
    columns = ", ".join(f"{name} {db_type}" for name, db_type, _ in COLUMNS)
    admin.execute(f"create table {SCHEMA}.edges (id bigint primary key, {columns})")
    for row in range(3):
        values = ", ".join(values[row] for _, _, values in COLUMNS)
        admin.execute(f"insert into {SCHEMA}.edges values ({row}, {values})")
    # many rows, so that the read spans several Arrow batches and a literal bound applies
    admin.execute(
        f"insert into {SCHEMA}.edges (id, i4, t, tz) select i, i, md5(i::text), "
        f"timestamptz '2024-01-01' + i * interval '1 second' from generate_series(10, 200009) i"
    )
    yield f"{SCHEMA}.edges"
    admin.execute(f"drop schema {SCHEMA} cascade")


def _layout(extra: list[tuple[str, str]] | None = None) -> RowLayout:
    payload = [Column("id", "bigint"), *(Column(n, t) for n, t, _ in COLUMNS)]
    payload += [Column(n, t) for n, t in extra or []]
    return RowLayout("postgres", (Column("id", "bigint"),), tuple(payload))


def _query(table: str, layout: RowLayout) -> str:
    names = [c.name for c in (*layout.keys, *(layout.payload or ()))]
    return f"select {', '.join(names)} from {table} where id >= %s::bigint order by id"


def _row_path(uri: str, sql: str, params: list[Any], layout: RowLayout) -> list[Any]:
    builder = BatchBuilder(layout)
    with psycopg.connect(uri) as conn:
        rows = conn.execute(sql, params).fetchall()
    return builder.snapshot_arrays(rows)


def _direct_path(
    uri: str, sql: str, params: list[Any], layout: RowLayout, landing_uri: str | None = None
) -> tuple[list[Any], int]:
    """The direct read's arrays, whole, and its number of Arrow batches (``landing_uri``:
    the landing's URI, by default ``uri``)."""
    with psycopg.connect(uri) as conn:
        read = snapshot_arrow.reader(conn, landing_uri or uri, layout)
        assert read is not None, "the layout's types are all direct and ADBC is installed"
        pages = list(read(sql, params))
    return [pa.concat_arrays([page[i] for page in pages]) for i in range(len(pages[0]))], len(pages)


def test_direct_read_equals_the_row_path_for_every_type(pg_uri: str, table: str) -> None:
    layout = _layout()
    sql, params = _query(table, layout), ["0"]
    direct, pages = _direct_path(pg_uri, sql, params, layout)
    assert pages > 1, "the read spans several Arrow batches"
    rows = _row_path(pg_uri, sql, params, layout)
    names = ["id (key)", "id", *(name for name, _, _ in COLUMNS)]
    assert len(direct) == len(rows) == len(names)
    for name, got, want in zip(names, direct, rows, strict=True):
        assert got.type == want.type, name
        assert len(got) == len(want) == 200_003, name
        assert _bits(got).equals(_bits(want)), name
        assert got.is_null().equals(want.is_null()), name
    # the batch builder takes the direct arrays as it takes the row path's
    builder = BatchBuilder(layout)
    batch = builder.snapshot_batch(0, _ulids(len(direct[0])), direct)
    assert batch.schema == builder.schema and batch.num_rows == 200_003


def _bits(array: Any) -> Any:
    """Floats as their bit patterns (NaN equals NaN, -0.0 differs from 0.0); others as is."""
    if pa.types.is_float32(array.type):
        return array.view(pa.int32())
    if pa.types.is_float64(array.type):
        return array.view(pa.int64())
    return array


def _ulids(count: int) -> Any:
    from changefeed.spark.landing._snapshot_plan import ulid_column

    return ulid_column(bytes(16), 0, 0, count)


def test_the_bound_is_a_literal_and_quotes_are_escaped(pg_uri: str, table: str) -> None:
    layout = RowLayout("postgres", (Column("id", "bigint"),), (Column("vc", "varchar(5)"),))
    sql = f"select id, vc from {table} where vc = %s order by id"
    direct, _ = _direct_path(pg_uri, sql, ["x'y"], layout)
    assert direct[0].to_pylist() == [1] and direct[1].to_pylist() == ["x'y"]


@pytest.mark.parametrize("value", ["'infinity'", "'-infinity'", "'4713-01-01 BC'"])
def test_a_date_spark_cannot_hold_is_refused_naming_the_column(
    pg_uri: str, admin: Any, value: str
) -> None:
    admin.execute(f"create schema if not exists {SCHEMA}")
    admin.execute(f"drop table if exists {SCHEMA}.far")
    admin.execute(f"create table {SCHEMA}.far (id bigint primary key, happened timestamptz)")
    admin.execute(f"insert into {SCHEMA}.far values (1, now()), (2, {value})")
    layout = RowLayout("postgres", (Column("id", "bigint"),), (Column("happened", "timestamptz"),))
    with psycopg.connect(pg_uri) as conn:
        read = snapshot_arrow.reader(conn, pg_uri, layout)
        assert read is not None
        with pytest.raises(ChangefeedSourceError, match=r"column happened .* years 1 to 9999"):
            list(read(f"select id, happened from {SCHEMA}.far order by id", []))


@pytest.mark.parametrize("db_type", ["numeric(12,2)", "jsonb", "uuid", "int[]", "citext"])
def test_other_types_keep_the_row_path(pg_uri: str, db_type: str) -> None:
    layout = _layout([("other", db_type)])
    assert not snapshot_arrow.direct(layout)
    with psycopg.connect(pg_uri) as conn:
        assert snapshot_arrow.reader(conn, pg_uri, layout) is None


def test_the_direct_read_asks_for_utf8_whatever_the_uri_says(
    pg_uri: str, admin: Any, table: str
) -> None:
    """A landing URI with client_encoding=LATIN1 reads the same values as the row path
    over UTF-8 (the table holds text outside LATIN1), and a column name outside LATIN1 in
    the database, which the driver's catalog query reads, does not stop it."""
    admin.execute(f'create table if not exists {SCHEMA}."таблица" ("колонка" int)')
    layout = _layout()
    parts = urllib.parse.urlsplit(pg_uri)
    query = "&".join(q for q in (parts.query, "client_encoding=LATIN1") if q)
    latin1 = urllib.parse.urlunsplit(parts._replace(query=query))
    sql, params = _query(table, layout), ["0"]
    direct, _ = _direct_path(pg_uri, sql, params, layout, landing_uri=latin1)
    rows = _row_path(pg_uri, sql, params, layout)
    for got, want in zip(direct, rows, strict=True):
        assert _bits(got).equals(_bits(want))


def test_a_database_not_in_utf8_keeps_the_row_path(pg_uri: str, admin: Any) -> None:
    admin.execute("drop database if exists snapshot_latin1")
    admin.execute(
        "create database snapshot_latin1 encoding 'LATIN1' lc_collate 'C' lc_ctype 'C' "
        "template template0"
    )
    parts = urllib.parse.urlsplit(pg_uri)
    uri = urllib.parse.urlunsplit(parts._replace(path="/snapshot_latin1"))
    try:
        with psycopg.connect(uri) as conn:
            assert snapshot_arrow.reader(conn, uri, _layout()) is None
    finally:
        admin.execute("drop database snapshot_latin1")
