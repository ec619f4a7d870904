"""Argument checks of the client's public methods: the same rules the feed's routines
enforce (``CF007``), raised as :class:`InvalidArgument` before any round trip, so that a
null, a wrong type or a wrong length never reaches the database as a silent default.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from changefeed.client.errors import InvalidArgument

_INT32 = 2**31
_INT64 = 2**63


def integer(value: Any, what: str, low: int = -_INT64, high: int = _INT64) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high)``.

    >>> integer(3, "shard")
    3
    >>> integer(None, "shard")
    Traceback (most recent call last):
    changefeed.errors.InvalidArgument: shard must be an integer, not None
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {value!r}")
    if not low <= value < high:
        raise InvalidArgument(f"{what} must be in [{low}, {high}), not {value}")
    return int(value)


def shard(value: Any) -> int:
    """A shard id: a PostgreSQL ``integer``, a SQL Server ``int``."""
    return integer(value, "shard", -_INT32, _INT32)


def positive(value: Any, what: str) -> int:
    """An ``integer`` count of at least 1 (page size, max_rows)."""
    return integer(value, what, 1, _INT32)


def ulid(value: Any, what: str) -> bytes:
    """A ULID as 16 bytes (``bytes``, ``bytearray`` or ``memoryview``).

    >>> ulid(bytes(15), "cursor")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    changefeed.errors.InvalidArgument: cursor must be 16 bytes (...), not 15 bytes
    """
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(
            f"{what} must be 16 bytes (a ULID; ZERO_ULID for the beginning), not {value!r}"
        )
    data = bytes(value)
    if len(data) != 16:
        raise InvalidArgument(
            f"{what} must be 16 bytes (a ULID; ZERO_ULID for the beginning), not {len(data)} bytes"
        )
    return data


def write_id(value: Any) -> str:
    """A SQL Server write id (a ``uniqueidentifier``): a :class:`uuid.UUID` or its text.

    >>> write_id("0F8FAD5B-D9CB-469F-A165-70867728950E")
    '0f8fad5b-d9cb-469f-a165-70867728950e'
    """
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidArgument(
            f"write_id must be a uuid.UUID or its text, as safe_point's oldest pending write "
            f"or SqlServerWrite.write_id report it, not {value!r}"
        ) from None


def time_hint(value: Any) -> datetime | None:
    """None or a datetime (a naive one is read in the session's time zone)."""
    if value is not None and not isinstance(value, datetime):
        raise InvalidArgument(f"time_hint must be None or a datetime, not {value!r}")
    return value


def keys(rows: Any, width: int, names: Sequence[str]) -> list[tuple[Any, ...]]:
    """Key tuples, each with one value per key column (``names``), none of them None."""
    if isinstance(rows, str | bytes) or not hasattr(rows, "__iter__"):
        raise InvalidArgument(f"keys must be an iterable of key tuples, not {rows!r}")
    out = []
    for key in rows:
        if isinstance(key, str | bytes) or not isinstance(key, Sequence) or len(key) != width:
            raise InvalidArgument(
                f"each key must be a sequence of {width} value(s) ({', '.join(names)}), not {key!r}"
            )
        if any(v is None for v in key):
            raise InvalidArgument(f"key columns ({', '.join(names)}) must not be None: {key!r}")
        out.append(tuple(key))
    return out


def consumer(value: Any) -> str:
    """A registered consumer's name (retention, protocol 8.1): 1 to 200 characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidArgument(
            f"consumer must be a name of 1 to 200 characters (e.g. the landing table's "
            f"name), not {value!r}"
        )
    return value


def retention_policy(
    max_age: Any, keep_last: Any, override_consumers: Any, shard_id: Any
) -> tuple[int | None, int | None, bool, int | None]:
    """``retain``'s arguments as the routine takes them: (max_age in milliseconds,
    keep_last, override_consumers, shard), each checked (protocol 8.1).

    >>> retention_policy(timedelta(days=1), None, False, None)
    (86400000, None, False, None)
    """
    if max_age is None and keep_last is None:
        raise InvalidArgument(
            "retain needs a policy: max_age (remove events older than this), keep_last "
            "(keep the newest N events of each shard), or both"
        )
    if max_age is not None and (not isinstance(max_age, timedelta) or max_age < timedelta(0)):
        raise InvalidArgument(f"max_age must be a timedelta of at least 0, not {max_age!r}")
    age_ms = None if max_age is None else int(max_age.total_seconds() * 1000)
    if keep_last is not None:
        keep_last = integer(keep_last, "keep_last", 0, _INT64)
    if not isinstance(override_consumers, bool):
        raise InvalidArgument(
            f"override_consumers must be True or False, not {override_consumers!r}"
        )
    return age_ms, keep_last, override_consumers, None if shard_id is None else shard(shard_id)


def key_bound(values: Any, names: Sequence[str], what: str) -> str | None:
    """A snapshot's key bound (protocol 12.1) as the routines take it: None (unbounded), or
    a list or tuple of one JSON scalar (str, int, float or bool; not None) per key column,
    as JSON text.

    >>> key_bound((1000,), ["order_id"], "key_from")
    '[1000]'
    >>> key_bound(1000, ["order_id"], "key_from")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    changefeed.errors.InvalidArgument: key_from must be None or a list of 1 value ...
    """
    if values is None:
        return None
    form = f"{len(names)} value{'s' if len(names) != 1 else ''} ({', '.join(names)})"
    if not isinstance(values, list | tuple) or len(values) != len(names):
        raise InvalidArgument(f"{what} must be None or a list of {form}, not {values!r}")
    for value in values:
        if value is None or not isinstance(value, str | int | float | bool):
            raise InvalidArgument(
                f"{what} must hold a string, number or boolean per key column ({form}), not "
                f"{value!r}: pass other types (dates, decimals, uuids) as their text"
            )
    return json.dumps(list(values))
