"""A snapshot chunk read from PostgreSQL straight into Arrow (ADBC's PostgreSQL driver):
``COPY (chunk query) TO STDOUT (FORMAT binary)`` decoded in C++, with no Python object
per value. It is the same read as the row path's (the chunk's SQL, its bounds rendered
as literals by psycopg; text always as UTF-8) and gives the same Arrow values, for the
column types listed in :data:`DIRECT`; a feed with any other column type, a database that
is not UTF-8, or an environment without ``adbc-driver-postgresql`` keeps the row path
(psycopg rows, converted per value as every other read of the feed is).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from changefeed.dialects.rows import RowLayout, base_type
from changefeed.errors import ChangefeedSourceError

LOG = logging.getLogger("changefeed.snapshot")

#: PostgreSQL types whose ADBC Arrow type and values are exactly those of the row path
#: (``changefeed.dialects.rows.spark_type_of``). Not here, so read as rows: numeric
#: (ADBC gives its text, and numeric holds NaN), json and jsonb (the row path writes
#: sorted compact JSON), uuid, citext, name, arrays, ranges, intervals, and the rest.
DIRECT = frozenset({
    "smallint", "int2", "integer", "int", "int4", "bigint", "int8",
    "real", "float4", "double precision", "float8", "boolean", "bool",
    "date", "timestamp", "timestamp without time zone", "timestamp with time zone",
    "timestamptz", "text", "character varying", "varchar", "character", "char", "bpchar",
    "bytea",
})  # fmt: skip

#: Spark's dates and timestamps (and Python's) span the years 1 to 9999; PostgreSQL's go
#: further and have ``infinity``. Days and microseconds since 1970-01-01 UTC.
_DAYS = (-719_162, 2_932_896)
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def direct(layout: RowLayout) -> bool:
    """Whether every key and payload column of ``layout`` reads straight into Arrow."""
    columns = (*layout.keys, *(layout.payload or ()))
    return layout.dialect == "postgres" and all(base_type(c.db_type) in DIRECT for c in columns)


def _adbc() -> Any:
    try:
        import adbc_driver_postgresql.dbapi as adbc  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    return adbc


def reader(
    conn: Any, uri: str, layout: RowLayout
) -> Callable[[str, Sequence[Any]], Iterator[list[Any]]] | None:
    """A chunk read into Arrow arrays (the layout's key columns, then its payload
    columns, typed as :meth:`RowLayout.arrow_schema` has them), or None where the row path
    must read: a column type outside :data:`DIRECT`, a database that is not UTF-8, or no
    ADBC driver installed. ``conn`` is the task's psycopg connection (it renders the
    bounds as literals), ``uri`` the landing's connection URI."""
    if not direct(layout):
        return None
    if str(conn.info.parameter_status("server_encoding") or "").upper() != "UTF8":
        return None
    adbc = _adbc()
    if adbc is None:
        LOG.info("adbc-driver-postgresql is not installed: snapshot chunks are read as rows")
        return None
    import psycopg

    schema = layout.arrow_schema()
    names = [c.name for c in (*layout.keys, *(layout.payload or ()))]
    keys = len(layout.keys)
    expected = [schema.field(2 + i).type for i in range(keys)]
    if layout.payload is not None:
        struct = schema.field(schema.get_field_index("payload")).type
        expected += [struct.field(j).type for j in range(struct.num_fields)]
    render = psycopg.ClientCursor(conn)
    target = _direct_uri(uri)

    def read(sql: str, params: Sequence[Any]) -> Iterator[list[Any]]:
        # Literals, not parameters: with parameters the driver cannot use COPY.
        query = render.mogrify(sql, list(params))
        try:
            arrow_conn = adbc.connect(target)
        except adbc.Error as exc:
            raise ChangefeedSourceError(
                f"snapshot: the direct Arrow read could not connect: {str(exc).strip()}"
            ) from None
        with arrow_conn, arrow_conn.cursor() as cur:
            _require_utf8(cur)
            cur.execute(query)
            for batch in cur.fetch_record_batch():
                arrays = list(batch.columns)
                _check(arrays, expected, names)
                yield arrays

    return read


def _direct_uri(uri: str) -> str:
    """The landing's URI for the direct read: text as UTF-8 whatever ``client_encoding``
    the URI asks for (Arrow strings are UTF-8, and UTF-8 holds every character of a UTF-8
    database), and a connect timeout unless it has one."""
    parts = urllib.parse.urlsplit(uri)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
             if k != "client_encoding"]  # fmt: skip
    query.append(("client_encoding", "UTF8"))
    if not any(k == "connect_timeout" for k, _ in query):
        query.append(("connect_timeout", "15"))
    text = urllib.parse.urlencode(query, safe="/", quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=text))


def _require_utf8(cur: Any) -> None:
    # Text arrives in the client encoding and Arrow strings must be UTF-8; the URI asks
    # for it, but a server-side setting (a role's or the database's) could override it.
    cur.execute("select current_setting('client_encoding')")
    encoding = cur.fetchone()[0]
    if str(encoding).upper() != "UTF8":
        raise ChangefeedSourceError(
            f"a snapshot reads text as UTF-8 but the connection's client_encoding is "
            f"{encoding} (a setting of the role or database): reset it for the landing's role"
        )


def _check(arrays: Sequence[Any], expected: Sequence[Any], names: Sequence[str]) -> None:
    """Every array has the layout's type, and every date and timestamp fits Spark's range."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    for array, want, name in zip(arrays, expected, names, strict=True):
        if array.type != want:
            raise ChangefeedSourceError(
                f"snapshot: column {name} was read as Arrow {array.type}, expected {want}; "
                "please report this (a type the direct read maps differently)"
            )
        if pa.types.is_date32(want):
            bounds, raw = _DAYS, array.view(pa.int32())
        elif pa.types.is_timestamp(want):
            bounds, raw = _MICROS, array.view(pa.int64())
        else:
            continue
        if raw.null_count == len(raw):
            continue
        low_high = pc.min_max(raw)
        low, high = low_high["min"].as_py(), low_high["max"].as_py()
        if low < bounds[0] or high > bounds[1]:
            raise ChangefeedSourceError(
                f"snapshot: column {name} holds a value outside the years 1 to 9999 (for "
                "example 'infinity'), which Spark cannot hold: change those values in the "
                "source table, then land again"
            )
