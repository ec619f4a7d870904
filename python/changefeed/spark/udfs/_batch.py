"""The UDF bodies: one Arrow batch in, one Arrow array out, no Spark needed.

Each function maps the Arrow array(s) Spark hands an Arrow UDF to the result array, via
the numpy kernels of :mod:`changefeed.ulid`. They never loop over rows in Python; the
only per-row Python work happens on the error path of ``strict=True``, for one row.

NULL in gives NULL out. An invalid non-null value gives NULL, or with ``strict=True``
raises :class:`StrictULIDError` naming the value and why it is invalid.

A ULID argument may be its 16 bytes (binary) or its 26-character text (string, either
case), so ``ulid_timestamp(ulid_from_string(s))`` and ``ulid_timestamp(s)`` agree.

>>> import pyarrow as pa
>>> to_string(pa.array([bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), None, b"x"]))
<pyarrow.lib.StringArray object at ...>
[
  "01ARZ3NDEKTSV4RRFFQ69G5FAV",
  null,
  null
]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
from numpy.typing import NDArray

from changefeed import ulid as _ulid
from changefeed.errors import ChangefeedError
from changefeed.ulid import (
    ULID_BYTES,
    ULID_CHARS,
    UUID_CHARS,
    decode_valid,
    encode,
    from_uuid_valid,
    text_reason,
    uuid_reason,
)
from changefeed.ulid.arrow import rows, to_binary_array, to_string_array

HIGH_BYTES: Final = 8
_MICROS_PER_MS: Final = 1000


class StrictULIDError(ChangefeedError, ValueError):
    """An invalid value met a ``strict=True`` function.

    ``function`` is the SQL name of the function, ``value`` the offending input (``str``
    or ``bytes``) and ``reason`` why it is invalid. The message names all three, because
    on an executor the message is all that reaches the driver.

    >>> str(StrictULIDError("ulid_from_string", "01ARZ3NDEKTSV4RRFFQ69G5FAU", "bad char"))
    "ulid_from_string(strict=True): '01ARZ3NDEKTSV4RRFFQ69G5FAU' is not a valid ULID: bad char"
    """

    def __init__(self, function: str, value: object, reason: str, *, kind: str = "ULID") -> None:
        self.function = function
        self.value = value
        self.reason = reason
        super().__init__(f"{function}(strict=True): {value!r} is not a valid {kind}: {reason}")


def _is_text(arr: pa.Array | pa.ChunkedArray) -> bool:
    kind = arr.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _present(arr: pa.Array | pa.ChunkedArray) -> NDArray[np.bool_]:
    """True where the input is not null (computed only on the invalid-row path)."""
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _check(
    function: str,
    arr: pa.Array | pa.ChunkedArray,
    valid: NDArray[np.bool_],
    strict: bool,
    explain: Callable[[object], tuple[str, str]] | None = None,
) -> None:
    """With ``strict``, raise for the first non-null input that ``valid`` rejects."""
    if not strict or valid.all():
        return
    bad = np.flatnonzero(_present(arr) & ~valid)
    if bad.size == 0:
        return
    value = _value(arr, int(bad[0]))
    reason, kind = (explain or _ulid_reason)(value)
    raise StrictULIDError(function, value, reason, kind=kind)


def _value(arr: pa.Array | pa.ChunkedArray, index: int) -> object:
    """The input at ``index`` as ``str``/``bytes``; raw bytes if a string is not UTF-8."""
    try:
        return arr[index].as_py()
    except UnicodeDecodeError:
        # Spark strings may hold any bytes (a cast from binary); show them as they are.
        return arr[index].cast(pa.binary()).as_py()


def _ulid_reason(value: object) -> tuple[str, str]:
    if isinstance(value, str):
        return text_reason(value) or "rejected by the decoder", "ULID"
    if isinstance(value, bytes | bytearray):
        return f"wrong length {len(value)}, expected {ULID_BYTES} bytes", "ULID"
    return f"unsupported value of type {type(value).__name__}", "ULID"


def _uuid_reason(value: object) -> tuple[str, str]:
    if isinstance(value, str):
        return uuid_reason(value) or "rejected by the UUID parser", "UUID"
    return f"unsupported value of type {type(value).__name__}", "UUID"


def _high_reason(value: object) -> tuple[str, str]:
    if isinstance(value, bytes | bytearray):
        return f"wrong length {len(value)}, expected {HIGH_BYTES} bytes", "ulid_high"
    return f"unsupported value of type {type(value).__name__}", "ulid_high"


def _require(function: str, arr: object, *, text: bool, binary: bool) -> None:
    if not isinstance(arr, pa.Array | pa.ChunkedArray):
        raise TypeError(f"{function} expects a pyarrow Array, got {type(arr).__name__}")
    kind = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    ok = (
        pa.types.is_null(kind)
        or (text and (pa.types.is_string(kind) or pa.types.is_large_string(kind)))
        or (
            binary
            and (
                pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind)
                or pa.types.is_fixed_size_binary(kind)
            )
        )
    )
    if not ok:
        accepted = " or ".join(name for name, on in (("binary", binary), ("string", text)) if on)
        raise TypeError(f"{function} expects a {accepted} column, got Arrow type {kind}")


def raw_ulids(
    function: str, arr: pa.Array | pa.ChunkedArray, strict: bool
) -> tuple[NDArray[np.uint8], NDArray[np.bool_]]:
    """The ``(n, 16)`` ULIDs of a binary or ULID-text array, and which rows are valid."""
    _require(function, arr, text=True, binary=True)
    if _is_text(arr):
        text, present = rows(arr, ULID_CHARS)
        raw, decoded = decode_valid(text)
        valid = present & decoded
    else:
        raw, valid = rows(arr, ULID_BYTES)
    _check(function, arr, valid, strict)
    return raw, valid


def to_string(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_to_string``: canonical upper-case 26-character text."""
    raw, valid = raw_ulids("ulid_to_string", arr, strict)
    return to_string_array(encode(raw), valid)


def from_string(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_from_string``: 26-character text (either case) to 16 bytes."""
    _require("ulid_from_string", arr, text=True, binary=False)
    text, present = rows(arr, ULID_CHARS)
    raw, decoded = decode_valid(text)
    valid = present & decoded
    _check("ulid_from_string", arr, valid, strict)
    return to_binary_array(raw, valid)


def timestamp_ms(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_timestamp_ms``: milliseconds since the Unix epoch, as int64."""
    raw, valid = raw_ulids("ulid_timestamp_ms", arr, strict)
    return pa.array(_ulid.timestamp_ms(raw), type=pa.int64(), mask=~valid)


def timestamp(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_timestamp``: the creation instant, as a UTC timestamp (microsecond unit).

    Built from the integers, never through Python datetimes, so timestamps past the
    year 9999 (a 48-bit field reaches 10889) survive.
    """
    raw, valid = raw_ulids("ulid_timestamp", arr, strict)
    micros = _ulid.timestamp_ms(raw) * _MICROS_PER_MS
    return pa.array(micros, type=pa.int64(), mask=~valid).view(pa.timestamp("us", tz="UTC"))


def is_valid(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_is_valid``: whether a binary value is 16 bytes / a string is ULID text.

    NULL stays NULL. ``strict`` is accepted for symmetry and ignored: answering the
    question is this function's job, so it never raises for a bad value.
    """
    del strict
    _, valid = raw_ulids("ulid_is_valid", arr, False)
    return pa.array(valid, type=pa.bool_(), mask=~_present(arr) if arr.null_count else None)


def from_parts(high: pa.Array, low: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_from_parts``: mssql-changefeed ``ulid_high`` binary(8) + ``ulid_low`` bigint."""
    _require("ulid_from_parts", high, text=False, binary=True)
    if not (pa.types.is_integer(low.type) or pa.types.is_null(low.type)):
        raise TypeError(f"ulid_from_parts expects low as a bigint column, got {low.type}")
    high_rows, valid = rows(high, HIGH_BYTES)
    _check("ulid_from_parts", high, valid, strict, _high_reason)
    low = low.cast(pa.int64())
    if low.null_count:
        valid = valid & _present(low)
        low = low.fill_null(0)
    low_values = np.asarray(low.to_numpy(zero_copy_only=False), dtype=np.int64)
    return to_binary_array(_ulid.from_parts(high_rows, low_values), valid)


def to_uuid(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_to_uuid``: the same 16 bytes as lower-case 8-4-4-4-12 UUID text."""
    raw, valid = raw_ulids("ulid_to_uuid", arr, strict)
    return to_string_array(_ulid.to_uuid(raw), valid)


def from_uuid(arr: pa.Array, strict: bool = False) -> pa.Array:
    """``ulid_from_uuid``: UUID text (either case, with dashes) to the 16 bytes."""
    _require("ulid_from_uuid", arr, text=True, binary=False)
    text, present = rows(arr, UUID_CHARS)
    raw, parsed = from_uuid_valid(text)
    valid = present & parsed
    _check("ulid_from_uuid", arr, valid, strict, _uuid_reason)
    return to_binary_array(raw, valid)
