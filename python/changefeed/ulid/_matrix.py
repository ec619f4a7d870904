"""Checks that turn a caller's array into the row matrix a kernel expects."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def rows(array: object, width: int, function: str, name: str = "input") -> NDArray[np.uint8]:
    """``array`` as a C-contiguous ``(n, width)`` uint8 matrix, or a precise error.

    Copies only when the rows are not already contiguous.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"{function}() expects {name} as a numpy uint8 array of shape (n, {width}), "
            f"got {type(array).__name__}"
        )
    if array.dtype != np.uint8:
        raise TypeError(f"{function}() expects {name} of dtype uint8, got {array.dtype}")
    if array.ndim != 2 or array.shape[1] != width:
        raise ValueError(
            f"{function}() expects {name} of shape (n, {width}), got shape {array.shape}"
        )
    return np.ascontiguousarray(array)


def int64_vector(array: object, length: int, function: str, name: str) -> NDArray[np.int64]:
    """``array`` as a 1-D native int64 vector of ``length`` values, or a precise error."""
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"{function}() expects {name} as a numpy int64 array, got {type(array).__name__}"
        )
    if array.dtype.kind != "i" or array.dtype.itemsize != 8:
        raise TypeError(f"{function}() expects {name} of dtype int64, got {array.dtype}")
    if array.shape != (length,):
        raise ValueError(
            f"{function}() expects {name} of shape ({length},), got shape {array.shape}"
        )
    return np.ascontiguousarray(array, dtype=np.int64)
