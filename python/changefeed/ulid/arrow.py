"""Arrow adapters: Arrow arrays <-> the ``(n, width)`` row matrices of the kernels.

Both directions work on the Arrow buffers (validity bitmap, offsets, data) with numpy,
never one Python object per row, so a Spark Arrow batch costs a few numpy calls.

>>> import pyarrow as pa
>>> from changefeed.ulid import decode_valid, encode
>>> text, present = rows(pa.array(["01ARZ3NDEKTSV4RRFFQ69G5FAV", None, "short"]), 26)
>>> raw, decoded = decode_valid(text)
>>> to_string_array(encode(raw), present & decoded).to_pylist()
['01ARZ3NDEKTSV4RRFFQ69G5FAV', None, None]
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
from numpy.typing import NDArray

_INT32_MAX: Final = 2**31 - 1
_VARIABLE_WIDTH: Final = {
    pa.binary(): np.int32,
    pa.string(): np.int32,
    pa.large_binary(): np.int64,
    pa.large_string(): np.int64,
}


def rows(
    arr: pa.Array | pa.ChunkedArray, width: int
) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    """The values of ``arr`` as an ``(n, width)`` uint8 matrix and a validity vector.

    Accepts binary, large_binary, fixed_size_binary, string and large_string arrays
    (dictionary-encoded ones too), chunked or not, sliced or not. ``valid[i]`` is False
    where the value is null or not exactly ``width`` bytes long; the bytes of such rows
    are unspecified. When every slot already has ``width`` bytes the matrix is a
    read-only zero-copy view of the Arrow data buffer.

    >>> import pyarrow as pa
    >>> matrix, valid = rows(pa.array([b"ab", b"abc", None, b"cd"]), 2)
    >>> matrix[valid].tobytes(), valid.tolist()
    (b'abcd', [True, False, False, True])
    """
    if not isinstance(width, int) or width < 0:
        raise ValueError(f"rows() expects width as an int >= 0, got {width!r}")
    if not isinstance(arr, pa.Array | pa.ChunkedArray):
        raise TypeError(f"rows() expects a pyarrow Array or ChunkedArray, got {type(arr).__name__}")
    kind = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    if not (
        pa.types.is_null(kind) or pa.types.is_fixed_size_binary(kind) or kind in _VARIABLE_WIDTH
    ):
        raise TypeError(
            "rows() expects binary, large_binary, fixed_size_binary, string or large_string, "
            f"got {kind}"
        )
    if isinstance(arr, pa.ChunkedArray):
        return _concatenate([_chunk_rows(chunk, width) for chunk in arr.chunks], width)
    return _chunk_rows(arr, width)


def _concatenate(
    parts: list[tuple[NDArray[np.uint8], NDArray[np.bool_]]], width: int
) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.zeros((0, width), dtype=np.uint8), np.zeros(0, dtype=np.bool_)
    return (
        np.concatenate([matrix for matrix, _ in parts]),
        np.concatenate([valid for _, valid in parts]),
    )


def _validity(arr: pa.Array) -> NDArray[np.bool_]:
    n = len(arr)
    bitmap = arr.buffers()[0]
    if bitmap is None or arr.null_count == 0:
        return np.ones(n, dtype=np.bool_)
    # Unpack only the bytes that hold this (possibly sliced) array's bits.
    first_byte, first_bit = divmod(arr.offset, 8)
    packed = np.frombuffer(bitmap, dtype=np.uint8)[first_byte : (arr.offset + n + 7) // 8]
    bits = np.unpackbits(packed, bitorder="little")
    return bits[first_bit : first_bit + n].view(np.bool_)


def _data(buffer: pa.Buffer | None) -> NDArray[np.uint8]:
    if buffer is None:
        return np.zeros(0, dtype=np.uint8)
    data = np.frombuffer(buffer, dtype=np.uint8)
    # Arrow buffers are immutable by contract, but numpy would let a caller write to them.
    data.flags.writeable = False
    return data


def _chunk_rows(arr: pa.Array, width: int) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    kind = arr.type
    if pa.types.is_dictionary(kind):
        return _chunk_rows(arr.dictionary_decode(), width)
    n = len(arr)
    if n == 0 or pa.types.is_null(kind):
        return np.zeros((n, width), dtype=np.uint8), np.zeros(n, dtype=np.bool_)
    valid = _validity(arr)
    if pa.types.is_fixed_size_binary(kind):
        if kind.byte_width != width:
            return np.zeros((n, width), dtype=np.uint8), np.zeros(n, dtype=np.bool_)
        start = arr.offset * width
        data = _data(arr.buffers()[1])[start : start + n * width]
        return data.reshape(n, width), valid
    offset_type = _VARIABLE_WIDTH[kind]
    offsets = np.frombuffer(arr.buffers()[1], dtype=offset_type)[arr.offset : arr.offset + n + 1]
    data = _data(arr.buffers()[2])
    right_length = np.diff(offsets) == width
    if right_length.all():
        # Equal lengths make the values one contiguous run: view it as the matrix.
        first = int(offsets[0])
        return data[first : first + n * width].reshape(n, width), valid
    valid &= right_length
    matrix = np.zeros((n, width), dtype=np.uint8)
    kept = np.flatnonzero(valid)
    matrix[kept] = data[offsets[kept, None] + np.arange(width)]
    return matrix, valid


def _buffers(
    rows: NDArray[np.uint8], valid: NDArray[np.bool_], function: str, large: bool
) -> tuple[int, list[pa.Buffer | None], int]:
    if not isinstance(rows, np.ndarray) or rows.dtype != np.uint8 or rows.ndim != 2:
        raise TypeError(f"{function}() expects rows as a 2-D numpy uint8 array")
    n, width = rows.shape
    if not isinstance(valid, np.ndarray) or valid.dtype != np.bool_ or valid.shape != (n,):
        raise TypeError(f"{function}() expects valid as a numpy bool array of shape ({n},)")
    if not large and n * width > _INT32_MAX:
        raise ValueError(
            f"{function}() got {n * width} bytes, more than 32-bit offsets address; "
            "pass large=True or fewer rows"
        )
    offsets = np.arange(n + 1, dtype=np.int64 if large else np.int32)
    offsets *= width
    null_count = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    data = pa.py_buffer(np.ascontiguousarray(rows))
    return n, [bitmap, pa.py_buffer(offsets), data], null_count


def to_string_array(
    rows: NDArray[np.uint8], valid: NDArray[np.bool_], *, large: bool = False
) -> pa.StringArray:
    """An Arrow string array of the ASCII ``rows``, null where ``valid`` is False.

    Raises ValueError if a valid row holds a non-ASCII byte (it would not be UTF-8).
    ``large=True`` returns a ``large_string`` array (64-bit offsets).

    >>> import numpy as np
    >>> text = np.frombuffer(b"abcdef", np.uint8).reshape(3, 2)
    >>> to_string_array(text, np.array([True, False, True])).to_pylist()
    ['ab', None, 'ef']
    """
    n, buffers, null_count = _buffers(rows, valid, "to_string_array", large)
    if rows.size and int(rows.max()) > 0x7F:
        # Only valid rows must be UTF-8: Arrow never reads the bytes behind a null.
        non_ascii = np.flatnonzero((rows > 0x7F).any(axis=1) & valid)
        if non_ascii.size:
            row = int(non_ascii[0])
            raise ValueError(
                f"to_string_array() needs ASCII rows, row {row} is {rows[row].tobytes()!r}"
            )
    kind = pa.large_string() if large else pa.string()
    return pa.Array.from_buffers(kind, n, buffers, null_count=null_count)


def to_binary_array(
    rows: NDArray[np.uint8], valid: NDArray[np.bool_], *, large: bool = False
) -> pa.BinaryArray:
    """An Arrow binary array of the ``rows``, null where ``valid`` is False.

    ``large=True`` returns a ``large_binary`` array (64-bit offsets).

    >>> import numpy as np
    >>> raw = np.zeros((2, 16), np.uint8)
    >>> to_binary_array(raw, np.array([True, False])).to_pylist()
    [b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00', None]
    """
    n, buffers, null_count = _buffers(rows, valid, "to_binary_array", large)
    kind = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(kind, n, buffers, null_count=null_count)
