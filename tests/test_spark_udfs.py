"""changefeed.spark.udfs: the ULID Arrow UDFs against python-ulid, in a real local Spark.

The Arrow batch bodies are also exercised directly (no Spark) for the Arrow layouts
Spark may hand them (chunked, large, dictionary, all-null).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import ulid as pyulid

from changefeed.spark.udfs import FUNCTION_NAMES, StrictULIDError, _batch

pytestmark = pytest.mark.spark

SQL_NAMES = (
    "ulid_to_string",
    "ulid_from_string",
    "ulid_timestamp",
    "ulid_timestamp_ms",
    "ulid_is_valid",
    "ulid_from_parts",
    "ulid_to_uuid",
    "ulid_from_uuid",
)
GOOD = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
GOOD_RAW = bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b")


# -- the oracle ---------------------------------------------------------------------------


def oracle_to_string(value: bytes | None) -> str | None:
    if value is None or len(value) != 16:
        return None
    return str(pyulid.ULID(value))


def oracle_from_string(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return bytes(pyulid.ULID.from_str(value).bytes)
    except ValueError:
        return None


def oracle_timestamp_ms(value: bytes | None) -> int | None:
    if value is None or len(value) != 16:
        return None
    return int(pyulid.ULID(value).milliseconds)


def oracle_to_uuid(value: bytes | None) -> str | None:
    if value is None or len(value) != 16:
        return None
    return str(pyulid.ULID(value).to_uuid())


def oracle_from_uuid(value: str | None) -> bytes | None:
    # uuid.UUID also takes braces, URNs and no dashes; the canonical form is what we accept.
    if value is None or len(value) != 36 or [i for i, c in enumerate(value) if c == "-"] != [
        8, 13, 18, 23,
    ]:  # fmt: skip
        return None
    try:
        return uuid.UUID(value).bytes
    except ValueError:
        return None


def oracle_from_parts(high: bytes | None, low: int | None) -> bytes | None:
    if high is None or low is None or len(high) != 8:
        return None
    return high + low.to_bytes(8, "big", signed=True)


# -- edge cases ---------------------------------------------------------------------------

EDGE_BINARY: list[bytes | None] = [
    bytes(16),  # all zero
    b"\xff" * 16,  # all 0xFF: max timestamp and max randomness
    b"\xff" * 6 + bytes(10),  # max timestamp (year 10889)
    bytes(8) + b"\x80" + bytes(7),  # bit 63 of the low half
    GOOD_RAW,
    b"",
    b"\x01" * 15,
    b"\x01" * 17,
    b"\x00",
    None,
]

EDGE_TEXT: list[str | None] = [
    GOOD,
    GOOD.lower(),
    "01arZ3NDEKtsv4RRFFQ69G5FAV",  # mixed case
    "00000000000000000000000000",
    "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # the largest ULID
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # first char > '7': 129 bits
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    GOOD[:-1] + "I",
    GOOD[:-1] + "L",
    GOOD[:-1] + "O",
    GOOD[:-1] + "U",
    GOOD[:-1] + "u",
    GOOD[:-1] + "!",
    GOOD[:-1] + "é",  # 26 characters, 27 UTF-8 bytes
    GOOD[:-2] + "é",  # 25 characters, 26 UTF-8 bytes
    GOOD[:-1] + "\u017f",  # long s: upper-cases to 'S' in Java
    GOOD[:-1],
    GOOD + "0",
    GOOD + "\n",
    " " + GOOD[1:],
    "",
    None,
]

EDGE_UUID: list[str | None] = [
    "01563e3a-b5d3-d676-4c61-efb99302bd5b",
    "01563E3A-B5D3-D676-4C61-EFB99302BD5B",
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "01563e3ab5d3d6764c61efb99302bd5b",  # no dashes
    "01563e3a-b5d3-d676-4c61-efb99302bd5g",  # not hex
    "01563e3a_b5d3-d676-4c61-efb99302bd5b",  # dash missing
    "{01563e3a-b5d3-d676-4c61-efb99302bd}",
    "",
    None,
]

EDGE_PARTS: list[tuple[bytes | None, int | None]] = [
    (GOOD_RAW[:8], -1),
    (GOOD_RAW[:8], 0),
    (b"\xff" * 8, -(2**63)),
    (bytes(8), 2**63 - 1),
    (GOOD_RAW[:7], 1),
    (GOOD_RAW, 1),
    (None, 1),
    (GOOD_RAW[:8], None),
]


# -- Spark fixtures -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def registered(spark: Any) -> Any:
    from changefeed.spark.udfs import register

    assert register(spark) == SQL_NAMES
    return spark


def _table(**columns: tuple[list[Any], pa.DataType]) -> pa.Table:
    return pa.table({name: pa.array(values, type=kind) for name, (values, kind) in columns.items()})


def _collect(spark: Any, table: pa.Table, *exprs: str) -> dict[str, list[Any]]:
    """Run ``exprs`` over ``table`` in one Spark job; columns come back as Python lists.

    Timestamps come back as epoch microseconds: Python datetimes end at year 9999.
    """
    result = spark.createDataFrame(table).selectExpr(*exprs).toArrow()
    return {
        name: (
            column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column
        ).to_pylist()
        for name, column in zip(result.column_names, result.columns, strict=True)
    }


def _millis(values: pa.ChunkedArray) -> list[int | None]:
    return [None if v is None else v // 1000 for v in values.cast(pa.int64()).to_pylist()]


# -- tests --------------------------------------------------------------------------------


def test_register_uses_the_documented_names() -> None:
    assert FUNCTION_NAMES == SQL_NAMES


def test_random_values_match_python_ulid(registered: Any) -> None:
    n = 100_000
    rng = np.random.default_rng(20261121)
    raw = [bytes(row) for row in rng.integers(0, 256, size=(n, 16), dtype=np.uint8)]
    text = [str(pyulid.ULID(value)) for value in raw]
    # Every third string lower-cased, every fifth with one random printable character.
    positions = rng.integers(0, 26, size=n)
    printable = rng.integers(32, 127, size=n)
    for i in range(0, n, 3):
        text[i] = text[i].lower()
    for i in range(0, n, 5):
        p = int(positions[i])
        text[i] = text[i][:p] + chr(int(printable[i])) + text[i][p + 1 :]
    uuids = [str(uuid.UUID(bytes=value)) for value in raw]
    for i in range(0, n, 4):
        uuids[i] = uuids[i].upper()
    lows = rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64).tolist()
    table = _table(
        u=(raw, pa.binary()),
        s=(text, pa.string()),
        g=(uuids, pa.string()),
        high=([value[:8] for value in raw], pa.binary()),
        low=(lows, pa.int64()),
    )
    spark = registered
    result = (
        spark.createDataFrame(table)
        .selectExpr(
            "ulid_to_string(u) as to_string",
            "ulid_from_string(s) as from_string",
            "ulid_timestamp(u) as ts",
            "ulid_timestamp_ms(u) as ts_ms",
            "ulid_is_valid(s) as valid_text",
            "ulid_from_parts(high, low) as from_parts",
            "ulid_to_uuid(u) as to_uuid",
            "ulid_from_uuid(g) as from_uuid",
        )
        .toArrow()
    )
    expected_ms = [oracle_timestamp_ms(v) for v in raw]
    expected_from = [oracle_from_string(v) for v in text]
    assert result.column("to_string").to_pylist() == [oracle_to_string(v) for v in raw]
    assert result.column("from_string").to_pylist() == expected_from
    assert 5_000 <= expected_from.count(None) <= 15_000  # invalid strings were exercised
    assert result.column("ts_ms").to_pylist() == expected_ms
    assert _millis(result.column("ts")) == expected_ms
    assert result.column("valid_text").to_pylist() == [v is not None for v in expected_from]
    assert result.column("from_parts").to_pylist() == [
        oracle_from_parts(v[:8], low) for v, low in zip(raw, lows, strict=True)
    ]
    assert result.column("to_uuid").to_pylist() == [oracle_to_uuid(v) for v in raw]
    assert result.column("from_uuid").to_pylist() == [oracle_from_uuid(v) for v in uuids]


def test_binary_edge_cases(registered: Any) -> None:
    got = _collect(
        registered,
        _table(u=(EDGE_BINARY, pa.binary())),
        "ulid_to_string(u) as s",
        "ulid_timestamp_ms(u) as ms",
        "ulid_timestamp(u) as ts",
        "ulid_is_valid(u) as ok",
        "ulid_to_uuid(u) as g",
    )
    assert got["s"] == [oracle_to_string(v) for v in EDGE_BINARY]
    assert got["s"][:4] == [
        "00000000000000000000000000",
        "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "7ZZZZZZZZZ0000000000000000",
        "00000000000008000000000000",
    ]
    assert got["ms"] == [oracle_timestamp_ms(v) for v in EDGE_BINARY]
    assert got["ms"][1] == 2**48 - 1
    assert got["ts"] == [None if ms is None else ms * 1000 for ms in got["ms"]]
    assert got["ok"] == [None if v is None else len(v) == 16 for v in EDGE_BINARY]
    assert got["g"] == [oracle_to_uuid(v) for v in EDGE_BINARY]


def test_timestamps_past_year_9999_survive_in_spark(registered: Any) -> None:
    row = registered.sql(
        "select unix_millis(ulid_timestamp(x'ffffffffffff00000000000000000000')) as ms,"
        " year(ulid_timestamp(x'ffffffffffff00000000000000000000')) as y"
    ).first()
    assert (row.ms, row.y) == (2**48 - 1, 10889)


def test_text_edge_cases(registered: Any) -> None:
    got = _collect(
        registered,
        _table(s=(EDGE_TEXT, pa.string())),
        "ulid_from_string(s) as raw",
        "ulid_is_valid(s) as ok",
        "ulid_to_string(s) as canonical",
        "ulid_timestamp_ms(s) as ms",
    )
    expected = [oracle_from_string(v) for v in EDGE_TEXT]
    assert got["raw"] == expected
    assert [v is not None for v in expected[:5]] == [True] * 5
    assert expected[5:] == [None] * (len(EDGE_TEXT) - 5)
    assert got["ok"] == [
        None if v is None else e is not None for v, e in zip(EDGE_TEXT, expected, strict=True)
    ]
    assert got["canonical"] == [None if e is None else oracle_to_string(e) for e in expected]
    assert got["ms"] == [oracle_timestamp_ms(e) for e in expected]


def test_uuid_and_parts_edge_cases(registered: Any) -> None:
    got = _collect(registered, _table(g=(EDGE_UUID, pa.string())), "ulid_from_uuid(g) as raw")
    assert got["raw"] == [oracle_from_uuid(v) for v in EDGE_UUID]
    assert got["raw"][:4] == [GOOD_RAW, GOOD_RAW, bytes(16), b"\xff" * 16]
    highs, lows = zip(*EDGE_PARTS, strict=True)
    got = _collect(
        registered,
        _table(h=(list(highs), pa.binary()), low=(list(lows), pa.int64())),
        "ulid_from_parts(h, low) as raw",
    )
    assert got["raw"] == [oracle_from_parts(h, low) for h, low in EDGE_PARTS]


def test_invalid_utf8_text_is_null_not_a_crash(registered: Any) -> None:
    # Spark strings can hold bytes that are not UTF-8 (a cast from binary).
    row = registered.sql(
        "select ulid_from_string(cast(concat(x'ff', cast(repeat('0', 25) as binary)) as string)) a,"
        " ulid_is_valid(cast(concat(x'ff', cast(repeat('0', 25) as binary)) as string)) as b,"
        " ulid_from_uuid(cast(concat(x'ff', cast(repeat('0', 35) as binary)) as string)) as c"
    ).first()
    assert (row.a, row.b, row.c) == (None, False, None)


def test_null_literals_and_empty_input(registered: Any) -> None:
    row = registered.sql(
        "select ulid_to_string(null) as a, ulid_from_string(null) as b,"
        " ulid_timestamp(null) as c, ulid_is_valid(null) as d, ulid_from_parts(null, null) as e"
    ).first()
    assert tuple(row) == (None,) * 5
    assert registered.sql("select ulid_to_string(x'00') as s where false").collect() == []


@pytest.mark.parametrize("iterator", [False, True], ids=["array", "iterator"])
def test_array_and_iterator_forms_agree(spark: Any, iterator: bool) -> None:
    from changefeed.spark.udfs import make_udf

    def f(name: str) -> Callable[..., Any]:
        return make_udf(name, iterator=iterator)  # type: ignore[no-any-return]

    table = _table(
        u=(EDGE_BINARY, pa.binary()),
        s=(EDGE_TEXT[: len(EDGE_BINARY)], pa.string()),
        g=(EDGE_UUID, pa.string()),
    )
    df = spark.createDataFrame(table)
    result = df.select(
        f("ulid_to_string")("u").alias("to_string"),
        f("ulid_from_string")("s").alias("from_string"),
        f("ulid_timestamp_ms")("u").alias("ms"),
        f("ulid_is_valid")("s").alias("ok"),
        f("ulid_to_uuid")("u").alias("to_uuid"),
        f("ulid_from_uuid")("g").alias("from_uuid"),
        f("ulid_from_parts")(df.u.substr(1, 8), df.u.substr(9, 8).isNull().cast("bigint")).alias(
            "parts"
        ),
    ).toArrow()
    assert result.column("to_string").to_pylist() == [oracle_to_string(v) for v in EDGE_BINARY]
    texts = EDGE_TEXT[: len(EDGE_BINARY)]
    assert result.column("from_string").to_pylist() == [oracle_from_string(v) for v in texts]
    assert result.column("ms").to_pylist() == [oracle_timestamp_ms(v) for v in EDGE_BINARY]
    assert result.column("to_uuid").to_pylist() == [oracle_to_uuid(v) for v in EDGE_BINARY]
    assert result.column("from_uuid").to_pylist() == [oracle_from_uuid(v) for v in EDGE_UUID]
    assert result.column("ok").to_pylist() == [
        None if v is None else oracle_from_string(v) is not None for v in texts
    ]
    assert result.column("parts").to_pylist() == [
        oracle_from_parts(None if v is None else v[:8], None if v is None else int(not v[8:]))
        for v in EDGE_BINARY
    ]


def test_python_column_functions(spark: Any) -> None:
    from pyspark.sql import functions as F

    import changefeed.spark.udfs as cs

    df = spark.createDataFrame(_table(u=([GOOD_RAW, None, b"x"], pa.binary())))
    out = df.select(
        cs.ulid_to_string("u").alias("s"),
        cs.ulid_to_uuid(F.col("u")).alias("g"),
        cs.ulid_is_valid("u").alias("ok"),
        cs.ulid_timestamp_ms(cs.ulid_from_string(cs.ulid_to_string("u"))).alias("ms"),
        cs.ulid_from_parts(F.substring("u", 1, 8), F.lit(-1)).alias("p"),
        cs.ulid_from_uuid(cs.ulid_to_uuid("u")).alias("back"),
        cs.ulid_timestamp("u").alias("ts"),
    ).toArrow()
    assert out.column("s").to_pylist() == [GOOD, None, None]
    assert out.column("g").to_pylist() == [oracle_to_uuid(GOOD_RAW), None, None]
    assert out.column("ok").to_pylist() == [True, None, False]
    assert out.column("ms").to_pylist() == [1469922850259, None, None]
    assert out.column("p").to_pylist() == [GOOD_RAW[:8] + b"\xff" * 8, None, None]
    assert out.column("back").to_pylist() == [GOOD_RAW, None, None]
    assert _millis(out.column("ts")) == [1469922850259, None, None]


STRICT_CASES = [
    ("ulid_from_string", "s", GOOD[:-1] + "U", "invalid character 'U' at position 25"),
    ("ulid_from_string", "s", "8" + GOOD[1:], "overflows 128 bits"),
    ("ulid_to_string", "u", "0102", "wrong length 2, expected 16 bytes"),
    ("ulid_from_uuid", "s", "01563e3a_b5d3-d676-4c61-efb99302bd5b", "expected '-' at position 8"),
]


@pytest.mark.parametrize(("name", "kind", "bad", "why"), STRICT_CASES)
def test_strict_mode_names_the_bad_value_and_why(
    spark: Any, name: str, kind: str, bad: str, why: str
) -> None:
    from changefeed.spark.udfs import make_udf

    if kind == "u":
        table = _table(u=([GOOD_RAW, None, bytes.fromhex(bad)], pa.binary()))
        shown = repr(bytes.fromhex(bad))
    else:
        table = _table(u=([oracle_to_uuid(GOOD_RAW) if "uuid" in name else GOOD, None, bad],
                          pa.string()))  # fmt: skip
        shown = repr(bad)
    df = spark.createDataFrame(table)
    with pytest.raises(Exception) as caught:
        df.select(make_udf(name, strict=True)("u")).collect()
    message = str(caught.value)
    assert f"{name}(strict=True): {shown} is not a valid" in message
    assert why in message


def test_strict_mode_passes_valid_values_and_nulls(spark: Any) -> None:
    import changefeed.spark.udfs as cs

    df = spark.createDataFrame(_table(s=([GOOD, None, GOOD.lower()], pa.string())))
    out = df.select(
        cs.ulid_to_string(cs.ulid_from_string("s", strict=True), strict=True).alias("x")
    ).toArrow()
    assert out.column("x").to_pylist() == [GOOD, None, GOOD]


def test_register_strict_raises_from_sql(spark: Any) -> None:
    from changefeed.spark.udfs import register

    register(spark, strict=True)
    try:
        with pytest.raises(Exception, match=r"'not-a-ulid' is not a valid ULID: wrong length 10"):
            spark.sql("select ulid_from_string('not-a-ulid')").collect()
    finally:
        register(spark)
    assert spark.sql("select ulid_from_string('not-a-ulid') as x").first().x is None


# -- the Arrow batch bodies, without Spark ------------------------------------------------


def test_batch_bodies_accept_every_arrow_layout() -> None:
    values = [GOOD_RAW, None, b"short", b"\xff" * 16]
    expected = [GOOD, None, None, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"]
    layouts: list[Any] = [
        pa.array(values, pa.binary()),
        pa.array(values, pa.large_binary()),
        pa.chunked_array([values[:2], values[2:]], pa.binary()),
        pa.array(values, pa.binary()).slice(1),
        pa.array(values, pa.binary()).dictionary_encode(),
    ]
    for arr in layouts:
        got = _batch.to_string(arr).to_pylist()
        assert got == expected[len(expected) - len(arr) :], arr.type
    assert _batch.to_string(pa.nulls(3)).to_pylist() == [None] * 3
    assert _batch.from_string(pa.array([GOOD, None], pa.large_string())).to_pylist() == [
        GOOD_RAW,
        None,
    ]
    fixed = pa.array([GOOD_RAW], pa.binary(16))
    assert _batch.timestamp_ms(fixed).to_pylist() == [1469922850259]


def test_batch_bodies_reject_wrong_types_with_a_clear_error() -> None:
    with pytest.raises(TypeError, match="ulid_to_string expects a binary or string column"):
        _batch.to_string(pa.array([1, 2]))
    with pytest.raises(TypeError, match="ulid_from_string expects a string column"):
        _batch.from_string(pa.array([GOOD_RAW]))
    with pytest.raises(TypeError, match="ulid_from_parts expects low as a bigint column"):
        _batch.from_parts(pa.array([GOOD_RAW[:8]]), pa.array(["1"]))


def test_strict_error_on_invalid_utf8_still_names_the_bytes() -> None:
    arr = pa.array([b"\xff" * 26], pa.binary()).view(pa.string())
    with pytest.raises(StrictULIDError, match=r"b'\\xff\\xff.*' is not a valid ULID"):
        _batch.from_string(arr, strict=True)


def test_strict_error_keeps_its_fields() -> None:
    with pytest.raises(StrictULIDError) as caught:
        _batch.from_parts(pa.array([b"1234567"]), pa.array([1]), strict=True)
    error = caught.value
    assert (error.function, error.value) == ("ulid_from_parts", b"1234567")
    assert error.reason == "wrong length 7, expected 8 bytes"
