"""Arrow adapters: every accepted input type, nulls, wrong lengths, chunks and slices."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ulid import ULID

from changefeed import ulid as cu
from changefeed.ulid.arrow import rows, to_binary_array, to_string_array

TEXT = ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "01bx5zzkbkactav9wevgemmvs0", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"]
VARIABLE_TYPES = [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]
ALL_TYPES = [*VARIABLE_TYPES, pa.binary(26)]


def arrow_array(values: list[str | None], kind: pa.DataType) -> pa.Array:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.array(values, kind)
    return pa.array([None if v is None else v.encode("latin-1") for v in values], kind)


def expected_rows(values: list[str | None], width: int) -> tuple[list[bytes], list[bool]]:
    valid = [v is not None and len(v.encode("latin-1")) == width for v in values]
    kept = [v.encode("latin-1") for v, ok in zip(values, valid, strict=True) if ok and v]
    return kept, valid


@pytest.mark.parametrize("kind", ALL_TYPES, ids=str)
def test_rows_of_each_type(kind: pa.DataType) -> None:
    matrix, valid = rows(arrow_array(TEXT, kind), 26)
    assert matrix.dtype == np.uint8
    assert matrix.shape == (3, 26)
    assert valid.tolist() == [True, True, True]
    assert [row.tobytes().decode() for row in matrix] == TEXT


@pytest.mark.parametrize("kind", ALL_TYPES, ids=str)
def test_equal_length_values_are_a_zero_copy_view(kind: pa.DataType) -> None:
    arr = arrow_array(TEXT, kind)
    matrix, _ = rows(arr, 26)
    data = np.frombuffer(arr.buffers()[-1], dtype=np.uint8)
    assert np.shares_memory(matrix, data)
    assert not matrix.flags.writeable


@pytest.mark.parametrize("kind", VARIABLE_TYPES, ids=str)
def test_nulls_and_wrong_lengths_are_invalid(kind: pa.DataType) -> None:
    values = [TEXT[0], None, TEXT[1][:-1], "", TEXT[2], TEXT[0] + "0", TEXT[1]]
    matrix, valid = rows(arrow_array(values, kind), 26)
    assert valid.tolist() == [True, False, False, False, True, False, True]
    assert [row.tobytes().decode() for row in matrix[valid]] == [TEXT[0], TEXT[2], TEXT[1]]
    assert not matrix[~valid].any()


@pytest.mark.parametrize("kind", ALL_TYPES, ids=str)
def test_a_null_of_the_right_width_is_invalid(kind: pa.DataType) -> None:
    # A fixed-width null still occupies 26 bytes, so this takes the zero-copy path.
    matrix, valid = rows(arrow_array([TEXT[0], None, TEXT[2]], kind), 26)
    assert valid.tolist() == [True, False, True]
    assert matrix[2].tobytes().decode() == TEXT[2]


def test_fixed_size_binary_of_another_width_is_all_invalid() -> None:
    _, valid = rows(pa.array([b"a" * 16, None], pa.binary(16)), 26)
    assert valid.tolist() == [False, False]
    matrix, valid = rows(pa.array([b"a" * 16, None], pa.binary(16)), 16)
    assert valid.tolist() == [True, False]
    assert matrix[0].tobytes() == b"a" * 16


@pytest.mark.parametrize("kind", ALL_TYPES, ids=str)
@pytest.mark.parametrize(("offset", "length"), [(1, 5), (3, 9), (9, 8), (17, 3), (20, 0)])
def test_sliced_arrays_respect_their_offset(kind: pa.DataType, offset: int, length: int) -> None:
    values: list[str | None] = [TEXT[i % 3] if i % 4 else None for i in range(20)]
    if pa.types.is_fixed_size_binary(kind):
        values = [v.upper() if v else v for v in values]
    else:
        values[5] = "short"
    sliced = arrow_array(values, kind).slice(offset, length)
    assert sliced.offset == offset
    matrix, valid = rows(sliced, 26)
    kept, expected_valid = expected_rows(values[offset : offset + length], 26)
    assert valid.tolist() == expected_valid
    assert [row.tobytes() for row in matrix[valid]] == kept


def test_sliced_all_valid_array_is_still_zero_copy() -> None:
    arr = pa.array(TEXT * 4).slice(5, 6)
    matrix, valid = rows(arr, 26)
    assert valid.all()
    assert [row.tobytes().decode() for row in matrix] == (TEXT * 4)[5:11]
    assert np.shares_memory(matrix, np.frombuffer(arr.buffers()[2], dtype=np.uint8))


@pytest.mark.parametrize("kind", [pa.string(), pa.binary(26)], ids=str)
def test_chunked_arrays_concatenate_their_chunks(kind: pa.DataType) -> None:
    values = [TEXT[0].upper(), None, TEXT[2], TEXT[1].upper(), None]
    chunks = [arrow_array(values[:2], kind), arrow_array([], kind), arrow_array(values[2:], kind)]
    chunked = pa.chunked_array(chunks, kind)
    matrix, valid = rows(chunked, 26)
    kept, expected_valid = expected_rows(values, 26)
    assert valid.tolist() == expected_valid
    assert [row.tobytes() for row in matrix[valid]] == kept
    single, single_valid = rows(pa.chunked_array([chunks[2]], kind), 26)
    assert single_valid.tolist() == [True, True, False]
    assert single.shape == (3, 26)


def test_chunked_array_of_sliced_chunks() -> None:
    base = pa.array([TEXT[0], None, TEXT[1], "x", TEXT[2], TEXT[0]])
    chunked = pa.chunked_array([base.slice(1, 3), base.slice(4, 2)])
    matrix, valid = rows(chunked, 26)
    assert valid.tolist() == [False, True, False, True, True]
    assert [row.tobytes().decode() for row in matrix[valid]] == [TEXT[1], TEXT[2], TEXT[0]]


def test_empty_inputs() -> None:
    for arr in (pa.chunked_array([], pa.string()), pa.array([], pa.binary()), pa.nulls(0)):
        matrix, valid = rows(arr, 16)
        assert matrix.shape == (0, 16)
        assert valid.shape == (0,)


def test_null_and_dictionary_arrays() -> None:
    _, valid = rows(pa.nulls(3), 26)
    assert valid.tolist() == [False, False, False]
    encoded = pa.array([TEXT[0], None, TEXT[0], "x"]).dictionary_encode()
    matrix, valid = rows(encoded, 26)
    assert valid.tolist() == [True, False, True, False]
    assert matrix[2].tobytes().decode() == TEXT[0]


def test_unsupported_inputs_are_rejected() -> None:
    with pytest.raises(TypeError, match="got int64"):
        rows(pa.array([1, 2]), 26)
    with pytest.raises(TypeError, match="got int64"):
        rows(pa.chunked_array([], pa.int64()), 26)
    with pytest.raises(TypeError, match="got double"):
        rows(pa.array([], pa.float64()), 26)
    with pytest.raises(TypeError, match="Array or ChunkedArray, got list"):
        rows([TEXT[0]], 26)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="width as an int >= 0"):
        rows(pa.array(TEXT), -1)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.text(alphabet="0aZ\xe9", min_size=2, max_size=4))),
    st.sampled_from(VARIABLE_TYPES),
    st.data(),
)
def test_rows_match_python_on_random_sliced_arrays(
    values: list[str | None], kind: pa.DataType, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(values)))
    length = data.draw(st.integers(0, len(values) - offset))
    width = 3
    arr = arrow_array(values, kind).slice(offset, length)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        encoded: list[bytes | None] = [None if v is None else v.encode() for v in values]
    else:
        encoded = [None if v is None else v.encode("latin-1") for v in values]
    window = encoded[offset : offset + length]
    matrix, valid = rows(arr, width)
    assert valid.tolist() == [v is not None and len(v) == width for v in window]
    assert [row.tobytes() for row in matrix[valid]] == [
        v for v in window if v is not None and len(v) == width
    ]


# --- numpy rows -> Arrow ----------------------------------------------------------------


def test_to_string_array_puts_nulls_where_invalid() -> None:
    text = np.frombuffer("".join(t.upper() for t in TEXT).encode(), np.uint8).reshape(3, 26)
    arr = to_string_array(text, np.array([True, False, True]))
    arr.validate(full=True)
    assert arr.type == pa.string()
    assert arr.null_count == 1
    assert arr.to_pylist() == [TEXT[0], None, TEXT[2]]
    large = to_string_array(text, np.ones(3, np.bool_), large=True)
    assert large.type == pa.large_string()
    assert large.to_pylist() == [t.upper() for t in TEXT]
    assert large.buffers()[0] is None


def test_to_binary_array_round_trips_through_rows() -> None:
    raw = cu.generate(1000, rng=np.random.default_rng(1))
    valid = np.arange(1000) % 7 != 0
    arr = to_binary_array(raw, valid)
    arr.validate(full=True)
    assert arr.type == pa.binary()
    assert arr.null_count == int((~valid).sum())
    back, back_valid = rows(arr, 16)
    np.testing.assert_array_equal(back_valid, valid)
    np.testing.assert_array_equal(back[valid], raw[valid])
    expected = [row.tobytes() if ok else None for row, ok in zip(raw, valid, strict=True)]
    assert arr.to_pylist() == expected
    assert to_binary_array(raw, valid, large=True).type == pa.large_binary()


def test_to_string_array_rejects_non_ascii_only_in_valid_rows() -> None:
    text = np.full((2, 3), ord("a"), np.uint8)
    text[1, 2] = 0xE9
    assert to_string_array(text, np.array([True, False])).to_pylist() == ["aaa", None]
    with pytest.raises(ValueError, match=r"needs ASCII rows, row 1 is b'aa\\xe9'"):
        to_string_array(text, np.array([True, True]))


def test_builders_check_their_input() -> None:
    with pytest.raises(TypeError, match="rows as a 2-D numpy uint8"):
        to_binary_array(np.zeros(3, np.uint8), np.ones(3, np.bool_))
    with pytest.raises(TypeError, match=r"valid as a numpy bool array of shape \(2,\)"):
        to_string_array(np.zeros((2, 3), np.uint8), np.ones(3, np.bool_))
    empty = to_string_array(np.zeros((0, 26), np.uint8), np.zeros(0, np.bool_))
    assert len(empty) == 0


def test_string_column_decodes_end_to_end_like_the_oracle() -> None:
    strings = [str(ULID.from_bytes(bytes(r))) for r in cu.generate(500)]
    values: list[str | None] = [s.lower() if i % 3 else s for i, s in enumerate(strings)]
    values[7] = None
    values[11] = "not a ulid"
    values[13] = "8" + strings[13][1:]
    values[17] = strings[17][:-1] + "U"
    text, present = rows(pa.chunked_array([pa.array(values[:250]), pa.array(values[250:])]), 26)
    raw, decoded = cu.decode_valid(text)
    valid = present & decoded
    assert np.flatnonzero(~valid).tolist() == [7, 11, 13, 17]
    column = to_binary_array(raw, valid)
    expected = [
        None if i in (7, 11, 13, 17) else ULID.from_str(s).bytes for i, s in enumerate(strings)
    ]
    assert column.to_pylist() == expected
    again = to_string_array(cu.encode(raw), valid).to_pylist()
    assert again == [None if e is None else s for e, s in zip(expected, strings, strict=True)]
