"""The pure-SQL ULID macros, rendered by real dbt (tests/dbtkit.py) and run for real.

* Spark SQL runs in the local Spark session, next to the UDFs, on the same rows.
* PostgreSQL SQL runs in the embedded PostgreSQL server.
* T-SQL cannot run here (no SQL Server), so it is parsed with sqlfluff's ``tsql``
  dialect, and its arithmetic is checked by ``tsql_eval``: a small evaluator with T-SQL's
  semantics for exactly the constructs these macros use (big-endian binary <-> bigint
  casts, integer division, LIKE character classes under a binary collation, DATEADD).

Every engine's output must equal python-ulid's (and so the UDFs') on the same inputs,
invalid ones included.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import ulid as pyulid
from tests.dbtkit import DbtError, call, sqlserver_calls
from tests.test_spark_udfs import (
    EDGE_BINARY,
    EDGE_TEXT,
    oracle_from_string,
    oracle_timestamp_ms,
    oracle_to_string,
)

MACROS = ("ulid_to_string", "ulid_from_string", "ulid_timestamp")
# Each macro's argument: a binary ULID column u, or a text column s.
ARGUMENT = {"ulid_to_string": "u", "ulid_from_string": "s", "ulid_timestamp": "u"}
DATETIME2_MAX_MS = 253402300799999


def _random_cases(n: int, seed: int) -> tuple[list[bytes | None], list[str | None]]:
    """Edge cases plus ``n`` random ULIDs and texts (a fifth with one random character)."""
    rng = np.random.default_rng(seed)
    raw = [bytes(row) for row in rng.integers(0, 256, size=(n, 16), dtype=np.uint8)]
    text = [str(pyulid.ULID(value)) for value in raw]
    for i in range(0, n, 5):
        p = int(rng.integers(0, 26))
        text[i] = text[i][:p] + chr(int(rng.integers(32, 127))) + text[i][p + 1 :]
    for i in range(1, n, 3):
        text[i] = text[i].lower()
    binary: list[bytes | None] = [*EDGE_BINARY, *raw]
    texts: list[str | None] = [*EDGE_TEXT, *text]
    return binary, texts


@pytest.fixture(scope="module")
def spark_sql(dbt: Any) -> dict[str, str]:
    return dict(zip(MACROS, dbt.render_many([call(m, ARGUMENT[m]) for m in MACROS], "spark"),
                    strict=True))  # fmt: skip


@pytest.fixture(scope="module")
def postgres_sql(dbt: Any) -> dict[str, str]:
    rendered = dbt.render_many([call(m, ARGUMENT[m]) for m in MACROS], "postgres")
    return dict(zip(MACROS, rendered, strict=True))


@pytest.fixture(scope="module")
def tsql(dbt: Any) -> dict[str, str]:
    rendered = dbt.render_many(
        [snippet for m in MACROS for snippet in sqlserver_calls(m, [ARGUMENT[m]])], "postgres"
    )
    return dict(zip(MACROS, rendered, strict=True))


# -- Spark --------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_macros_equal_the_udfs_and_python_ulid(spark: Any, spark_sql: dict[str, str]) -> None:
    from changefeed.spark.udfs import register

    register(spark)
    binary, texts = _random_cases(20_000, seed=7)
    binary = binary + [None] * (len(texts) - len(binary))
    texts = texts + [None] * (len(binary) - len(texts))
    df = spark.createDataFrame(pa.table({"u": pa.array(binary, pa.binary()),
                                         "s": pa.array(texts, pa.string())}))  # fmt: skip
    df.createOrReplaceTempView("ulid_macro_cases")
    result = spark.sql(
        f"""
        select {spark_sql["ulid_to_string"]} as to_string,
               {spark_sql["ulid_from_string"]} as from_string,
               unix_millis({spark_sql["ulid_timestamp"]}) as ts_ms,
               sum(case when not ({spark_sql["ulid_to_string"]} <=> ulid_to_string(u))
                   then 1 else 0 end) over () as to_string_diffs,
               sum(case when not ({spark_sql["ulid_from_string"]} <=> ulid_from_string(s))
                   then 1 else 0 end) over () as from_string_diffs,
               sum(case when not ({spark_sql["ulid_timestamp"]} <=> ulid_timestamp(u))
                   then 1 else 0 end) over () as timestamp_diffs
        from ulid_macro_cases
        """
    ).toArrow()
    first = result.slice(0, 1).to_pylist()[0]
    assert (first["to_string_diffs"], first["from_string_diffs"], first["timestamp_diffs"]) == (
        0, 0, 0,
    )  # fmt: skip
    assert result.column("to_string").to_pylist() == [oracle_to_string(v) for v in binary]
    assert result.column("from_string").to_pylist() == [oracle_from_string(v) for v in texts]
    assert result.column("ts_ms").to_pylist() == [oracle_timestamp_ms(v) for v in binary]


@pytest.mark.spark
def test_spark_macros_on_literals_nulls_and_bad_utf8(spark: Any, dbt: Any) -> None:
    bad_utf8 = "cast(concat(x'ff', cast(repeat('0', 25) as binary)) as string)"
    snippets = [
        call("ulid_to_string", "x'01563e3ab5d3d6764c61efb99302bd5b'"),
        call("ulid_from_string", "'01arz3ndektsv4rrffq69g5fav'"),
        call("ulid_to_string", "cast(null as binary)"),
        call("ulid_from_string", "cast(null as string)"),
        call("ulid_timestamp", "cast(null as binary)"),
        call("ulid_from_string", bad_utf8),
        call("ulid_timestamp", "x'00'"),
    ]
    exprs = dbt.render_many(snippets, "spark")
    *values, typed = exprs
    row = spark.sql(
        "select " + ", ".join(f"{e} as c{i}" for i, e in enumerate(values)) + f", typeof({typed})"
    ).first()
    assert tuple(row) == (
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        bytearray.fromhex("01563e3ab5d3d6764c61efb99302bd5b"),
        None,
        None,
        None,
        None,
        "timestamp",
    )


# -- PostgreSQL ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_macros_equal_python_ulid(pg_uri: str, postgres_sql: dict[str, str]) -> None:
    import psycopg

    binary, texts = _random_cases(5_000, seed=11)
    with psycopg.connect(pg_uri) as conn:
        # Data in temporary tables: the rendered SQL contains '%' (modulo), which psycopg
        # would read as a placeholder in a query with parameters.
        conn.execute(
            "create temporary table ulid_bin as"
            " select * from unnest(%s::bytea[]) with ordinality as t(u, i)",
            (binary,),
        )
        conn.execute(
            "create temporary table ulid_text as"
            " select * from unnest(%s::text[]) with ordinality as t(s, i)",
            (texts,),
        )
        to_string, timestamp = postgres_sql["ulid_to_string"], postgres_sql["ulid_timestamp"]
        rows = conn.execute(
            f"""
            select {to_string}, (extract(epoch from {timestamp}) * 1000)::bigint,
                   pg_typeof({timestamp})::text
            from ulid_bin order by i
            """
        ).fetchall()
        assert [r[0] for r in rows] == [oracle_to_string(v) for v in binary]
        assert [r[1] for r in rows] == [oracle_timestamp_ms(v) for v in binary]
        assert {r[2] for r in rows} == {"timestamp with time zone"}
        from_string = postgres_sql["ulid_from_string"]
        decoded = conn.execute(
            f"select {from_string}, pg_typeof({from_string})::text from ulid_text order by i"
        ).fetchall()
    assert [r[0] for r in decoded] == [oracle_from_string(v) for v in texts]
    assert {r[1] for r in decoded} == {"bytea"}


# -- T-SQL --------------------------------------------------------------------------------


def test_tsql_renders_parse_as_tsql(tsql: dict[str, str]) -> None:
    from sqlfluff.core import Linter

    linter = Linter(dialect="tsql")
    for macro, sql in tsql.items():
        statement = f"SELECT {sql} AS x FROM dbo.events AS e;\n"
        parsed = linter.parse_string(statement)
        assert parsed.tree is not None, macro
        unparsable = [seg.raw for seg in parsed.tree.recursive_crawl("unparsable")]
        assert not unparsable, f"{macro}: unparsable T-SQL: {unparsable}"
        assert not parsed.violations, f"{macro}: {parsed.violations}"


def test_tsql_macros_compute_python_ulid_values(tsql: dict[str, str]) -> None:
    binary, texts = _random_cases(2_000, seed=13)
    to_string = tsql_compile(tsql["ulid_to_string"])
    from_string = tsql_compile(tsql["ulid_from_string"])
    timestamp = tsql_compile(tsql["ulid_timestamp"])
    assert [to_string(u=v) for v in binary] == [oracle_to_string(v) for v in binary]
    assert [from_string(s=v) for v in texts] == [oracle_from_string(v) for v in texts]
    epoch = dt.datetime(1970, 1, 1)
    expected = [oracle_timestamp_ms(v) for v in binary]
    got = [timestamp(u=v) for v in binary]
    assert got == [
        None if ms is None or ms > DATETIME2_MAX_MS else epoch + dt.timedelta(milliseconds=ms)
        for ms in expected
    ]
    # The last instant datetime2(3) holds, and one millisecond later.
    last = DATETIME2_MAX_MS.to_bytes(6, "big") + bytes(10)
    after = (DATETIME2_MAX_MS + 1).to_bytes(6, "big") + bytes(10)
    assert timestamp(u=last) == dt.datetime(9999, 12, 31, 23, 59, 59, 999000)
    assert timestamp(u=after) is None


def test_tsql_uses_a_binary_collation_and_no_subqueries(tsql: dict[str, str]) -> None:
    assert "COLLATE Latin1_General_BIN2" in tsql["ulid_from_string"]
    for macro, sql in tsql.items():
        assert "SELECT" not in sql.upper(), macro


# -- dispatch and argument checks ---------------------------------------------------------


@pytest.mark.parametrize("target", ["postgres", "spark"])
def test_public_macros_dispatch_to_the_adapter_implementation(dbt: Any, target: str) -> None:
    public = [call(m, "t.id") for m in MACROS]
    explicit = [call(f"{target}__{m}", "t.id") for m in MACROS]
    rendered = dbt.render_many(public + explicit, target)
    assert rendered[: len(MACROS)] == rendered[len(MACROS) :]


@pytest.mark.parametrize("macro", MACROS)
def test_default_implementation_names_the_supported_adapters(dbt: Any, macro: str) -> None:
    with pytest.raises(DbtError, match=r"supported adapters: spark \(and databricks\), postgres"):
        dbt.render(call(f"default__{macro}", "t.id"), "postgres")


@pytest.mark.parametrize("argument", ["none", "''", "42", "['a']"])
def test_macros_reject_an_argument_that_is_not_an_expression(dbt: Any, argument: str) -> None:
    with pytest.raises(DbtError, match="must be a SQL expression given as a non-empty string"):
        dbt.render("{{ changefeed.ulid_timestamp(" + argument + ") }}", "postgres")


def test_harness_reports_macro_logs_and_runs_operations(dbt: Any) -> None:
    logged: list[str] = []
    dbt.invoke(
        ["compile", "--inline", "{{ log('hello from jinja', info=True) }}select 1"],
        "postgres",
        on_log=logged.append,
    )
    assert "hello from jinja" in logged
    assert dbt.run_operation("generate_schema_name", {"custom_schema_name": "x"},
                             target="postgres") == []  # fmt: skip
    with pytest.raises(DbtError, match="no_such_macro"):
        dbt.run_operation("no_such_macro", target="postgres")
    with pytest.raises(DbtError, match="boom"):
        dbt.render("{{ exceptions.raise_compiler_error('boom') }}", "postgres")
    # A failed invocation leaves the harness usable.
    assert dbt.render_many(["select {{ 1 + 1 }}", "{{ 'x' }}"], "postgres") == ["select 2", "x"]


# -- a T-SQL evaluator for the constructs the sqlserver__ ULID macros use -----------------


def _tsql_cast(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "bigint":
        if isinstance(value, bytes):
            # binary -> bigint: the rightmost 8 bytes, big-endian, zero-padded on the left.
            return int.from_bytes(value[-8:].rjust(8, b"\0"), "big", signed=True)
        return int(value)
    if kind == "int":
        if not -(2**31) <= int(value) < 2**31:
            raise OverflowError(f"arithmetic overflow converting {value} to int")
        return int(value)
    if kind.startswith("binary("):
        size = int(kind[7:-1])
        if isinstance(value, int):
            # bigint -> binary(n): big-endian two's complement, cut to the rightmost n bytes.
            return value.to_bytes(8, "big", signed=True)[-size:].rjust(size, b"\0")
        return bytes(value)[:size].ljust(size, b"\0")
    if kind.startswith("datetime2"):
        return dt.datetime.fromisoformat(value)
    raise AssertionError(f"tsql_eval: cast to {kind} is not emulated")


def _tsql_like(value: str | None, pattern: str) -> bool | None:
    if value is None:
        return None
    regex = ""
    for token in re.findall(r"\[[^\]]*\]|%|_|.", pattern, flags=re.DOTALL):
        if token.startswith("["):
            regex += token
        elif token == "%":
            regex += ".*"
        elif token == "_":
            regex += "."
        else:
            regex += re.escape(token)
    # Latin1_General_BIN2: code-point ranges and case-sensitive, like Python's re.
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _tsql_dateadd(unit: str, amount: int, value: dt.datetime) -> dt.datetime:
    # Past 9999-12-31 Python raises OverflowError, as SQL Server raises for datetime2.
    delta = {"day": dt.timedelta(days=amount), "millisecond": dt.timedelta(milliseconds=amount)}
    return value + delta[unit]


def _none_safe(function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        return None if args and args[0] is None else function(*args)

    return wrapped


_TSQL_FUNCTIONS: dict[str, Any] = {
    "CASE_WHEN": lambda condition, value: value() if condition else None,
    "CAST": _tsql_cast,
    "LIKE": _tsql_like,
    "DATEADD": _tsql_dateadd,
    "DATALENGTH": _none_safe(len),
    "UPPER": _none_safe(str.upper),
    "SUBSTRING": _none_safe(lambda v, start, length: v[start - 1 : start - 1 + length]),
    "CHARINDEX": lambda needle, hay: 0 if not needle else hay.find(needle) + 1,
    "CONCAT": lambda *parts: "".join("" if p is None else str(p) for p in parts),
    "REPLICATE": lambda text, count: text * count,
}


def tsql_compile(sql: str) -> Callable[..., Any]:
    """Turn one rendered ``CASE WHEN c THEN v END`` T-SQL expression into a Python function.

    Only the constructs the sqlserver__ ULID macros use are translated; anything else
    fails to compile or evaluate, so a macro change that this cannot follow shows up.
    Columns become keyword arguments: ``tsql_compile(sql)(u=b"...")``.
    """
    match = re.fullmatch(r"\s*CASE WHEN (.*?)\s+THEN\s+(.*)\bEND\s*", sql, flags=re.DOTALL)
    assert match, f"not a CASE WHEN ... END expression: {sql[:200]}"
    condition, value = match.groups()
    condition = condition.replace(" COLLATE Latin1_General_BIN2", "")
    like = re.fullmatch(r"(.*?)\s+LIKE\s+(.*)", condition, flags=re.DOTALL)
    if like:
        condition = f"LIKE({like.group(1)}, {like.group(2)})"
    condition = re.sub(r"(?<![<>!=])=(?!=)", "==", condition).replace(" AND ", " and ")
    python = f"CASE_WHEN({condition}, lambda: ({value}))"
    python = python.replace(" COLLATE Latin1_General_BIN2", "")
    python = re.sub(r" AS (bigint|int|binary\(\d+\)|datetime2\(\d\))\)", r", '\1')", python)
    python = re.sub(r"DATEADD\((\w+),", r"DATEADD('\1',", python)
    python = python.replace(" / ", " // ")
    code = compile(python, "<tsql>", "eval")

    def evaluate(**columns: Any) -> Any:
        # DATALENGTH(None) == 16 is False in Python; in T-SQL NULL = 16 is unknown: same
        # branch. A NULL comparison elsewhere would raise here rather than pass silently.
        # One namespace as globals: the lazy THEN branch is a lambda, which sees globals only.
        return eval(code, {"__builtins__": {}, **_TSQL_FUNCTIONS, **columns})

    return evaluate
