"""The :class:`InvalidULID` error and the reasons it states.

The reasons are computed in Python from a single offending value, never per row: the
array kernels only find *which* row is bad, then ask here *why*.
"""

from __future__ import annotations

from string import hexdigits

from changefeed.errors import ChangefeedError
from changefeed.ulid._constants import (
    ALPHABET,
    DASH_POSITIONS,
    MAX_OVERFLOW_FREE_CHAR,
    ULID_BYTES,
    ULID_CHARS,
    UUID_CHARS,
)

_DECODABLE = frozenset(ALPHABET.decode("ascii") + ALPHABET.decode("ascii").lower())
_ALIASES = frozenset("ILOUilou")
_HEX = frozenset(hexdigits)


class InvalidULID(ChangefeedError, ValueError):
    """A value that is not a valid ULID (or UUID text, or 16-byte binary).

    ``index`` is the row of the value in the input, ``value`` the offending input as given
    (``bytes`` for a row of an array, ``str`` for scalar text) and ``reason`` what is wrong.

    >>> err = InvalidULID(3, "01ARZ3NDEKTSV4RRFFQ69G5FAU", "invalid character 'U' at position 25")
    >>> str(err)
    "row 3: '01ARZ3NDEKTSV4RRFFQ69G5FAU' is not a valid ULID: invalid character 'U' at position 25"
    >>> isinstance(err, ValueError), err.index
    (True, 3)
    """

    def __init__(self, index: int, value: object, reason: str, *, kind: str = "ULID") -> None:
        self.index = index
        self.value = value
        self.reason = reason
        self.kind = kind
        super().__init__(f"row {index}: {value!r} is not a valid {kind}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        # Exceptions pickle as type(self)(*self.args) by default, which this __init__
        # does not accept; multiprocessing and distributed workers pickle errors.
        return (_rebuild, (self.index, self.value, self.reason, self.kind))


def _rebuild(index: int, value: object, reason: str, kind: str) -> InvalidULID:
    return InvalidULID(index, value, reason, kind=kind)


def _show(char: str, raw: bool) -> str:
    # A byte from an array row reads best as a bytes literal ('\xff'), a str char as itself.
    return repr(char.encode("latin-1"))[1:] if raw else repr(char)


def _chars(value: str | bytes) -> tuple[str, bool]:
    if isinstance(value, str):
        return value, False
    return bytes(value).decode("latin-1"), True


def text_reason(value: str | bytes) -> str | None:
    """Why ``value`` is not canonical ULID text, or None if it is.

    Positions are 0-based.

    >>> text_reason("01ARZ3NDEKTSV4RRFFQ69G5FAV") is None
    True
    >>> text_reason("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")
    "first character '8' > '7' overflows 128 bits"
    >>> text_reason(b"01ARZ3NDEKTSV4RRFFQ69G5FA\\xff")
    "invalid character '\\\\xff' at position 25"
    """
    chars, raw = _chars(value)
    if len(chars) != ULID_CHARS:
        return f"wrong length {len(chars)}, expected {ULID_CHARS} characters"
    for position, char in enumerate(chars):
        if char not in _DECODABLE:
            alias = " (Crockford aliases I, L, O, U are not accepted)" if char in _ALIASES else ""
            return f"invalid character {_show(char, raw)} at position {position}{alias}"
    if ord(chars[0]) > MAX_OVERFLOW_FREE_CHAR:
        return f"first character {_show(chars[0], raw)} > '7' overflows 128 bits"
    return None


def uuid_reason(value: str | bytes) -> str | None:
    """Why ``value`` is not 8-4-4-4-12 hex UUID text, or None if it is.

    >>> uuid_reason("01563e3a-b5d3-d676-4c61-efb99302bd5b") is None
    True
    >>> uuid_reason("01563e3a_b5d3-d676-4c61-efb99302bd5b")
    "expected '-' at position 8, found '_'"
    """
    chars, raw = _chars(value)
    if len(chars) != UUID_CHARS:
        return f"wrong length {len(chars)}, expected {UUID_CHARS} characters"
    for position, char in enumerate(chars):
        if position in DASH_POSITIONS:
            if char != "-":
                return f"expected '-' at position {position}, found {_show(char, raw)}"
        elif char not in _HEX:
            return f"invalid hex character {_show(char, raw)} at position {position}"
    return None


def binary_reason(value: bytes) -> str | None:
    """Why ``value`` is not a 16-byte binary ULID, or None if it is."""
    if len(value) != ULID_BYTES:
        return f"wrong length {len(value)}, expected {ULID_BYTES} bytes"
    return None
