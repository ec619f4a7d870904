"""Cursors, starting positions and the offset format (docs/spark-source.md, "Offsets").

A cursor is the last ULID a consumer has processed on a shard (16 bytes, compared as
unsigned bytes); reads are ``cursor < ulid <= end``. In offsets, options and the landed
safe-point table a cursor is written as 32 lower-case hex digits, so string order equals
byte order.

An offset is JSON: ``{"version": 1, "cursors": {"<shard_id>": "<32 hex>", ...}}``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from changefeed.client.core import ZERO_ULID
from changefeed.errors import ChangefeedSourceError
from changefeed.ulid import ULID_BYTES, InvalidULID, decode_one, from_hex_one, to_hex_one

OFFSET_VERSION = 1
_ULID_CHARS = re.compile(r"[0-9A-Za-z]{26}")


def to_hex(cursor: bytes) -> str:
    """The offset form of a cursor.

    >>> to_hex(bytes(range(16)))
    '000102030405060708090a0b0c0d0e0f'
    """
    if len(cursor) != ULID_BYTES:
        raise ChangefeedSourceError(f"a cursor must be 16 bytes, got {len(cursor)}")
    return to_hex_one(cursor)


def from_hex(text: str, *, what: str = "cursor") -> bytes:
    """Parse 32 hex digits (an offset's cursor) into 16 bytes.

    >>> from_hex("000102030405060708090a0b0c0d0e0f") == bytes(range(16))
    True
    """
    try:
        return from_hex_one(text)
    except (InvalidULID, TypeError):
        raise ChangefeedSourceError(
            f"{what} {text!r} is not a cursor: expected 32 hex digits (16 bytes)"
        ) from None


def parse_ulid(text: str, *, what: str = "ULID") -> bytes:
    """26 characters of Crockford base32 (either case) to 16 bytes, with a clear error."""
    try:
        return decode_one(text)
    except InvalidULID as exc:
        raise ChangefeedSourceError(f"{what} {text!r} is not a valid ULID: {exc.reason}") from None


def timestamp_cursor(moment: datetime) -> bytes:
    """The cursor that starts a read at the first event of ``moment``'s millisecond.

    Reads are strictly after the cursor, so the cursor is the *largest* ULID of the
    previous millisecond: every event whose ULID time is at or after ``moment`` (to the
    millisecond) is read, every earlier one is not. (Protocol section 8 writes
    ``ts48(T) || 0x00...``; with the strict ``>`` that would skip an event whose ULID is
    exactly that value, so the predecessor is used.)

    >>> timestamp_cursor(datetime(1970, 1, 1, tzinfo=timezone.utc)) == ZERO_ULID
    True
    >>> timestamp_cursor(datetime(1970, 1, 1, 0, 0, 0, 2000, tzinfo=timezone.utc)).hex()
    '000000000001ffffffffffffffffffff'
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    delta = moment - epoch
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if ms <= 0:
        return ZERO_ULID
    if ms > 2**48:
        raise ChangefeedSourceError(f"timestamp {moment.isoformat()} is beyond the ULID range")
    return (ms - 1).to_bytes(6, "big") + b"\xff" * 10


@dataclass(frozen=True)
class StartingPosition:
    """Where a read starts on a shard that has no cursor yet.

    ``kind`` is ``beginning``, ``now``, ``ulid`` or ``timestamp``; ``cursor`` is the fixed
    cursor of ``beginning``/``ulid``/``timestamp`` (``now`` is resolved against the feed's
    safe points when the read is planned).
    """

    kind: str
    cursor: bytes | None
    text: str

    def fixed_cursor(self) -> bytes:
        """The cursor for a shard that ``now`` did not see (it had no events then)."""
        return self.cursor if self.cursor is not None else ZERO_ULID


def parse_starting_position(value: str | None) -> StartingPosition:
    """``beginning`` (default), ``now``, a 26-character ULID or an ISO-8601 timestamp.

    A ULID starts *after* that event; a timestamp at the first event of its millisecond
    (a timestamp without a zone is UTC).

    >>> parse_starting_position("beginning").cursor == ZERO_ULID
    True
    >>> parse_starting_position("2024-05-01T00:00:00Z").kind
    'timestamp'
    """
    text = "beginning" if value is None else str(value).strip()
    lowered = text.lower()
    if lowered in ("beginning", "earliest"):
        return StartingPosition("beginning", ZERO_ULID, text)
    if lowered in ("now", "latest"):
        return StartingPosition("now", None, text)
    if _ULID_CHARS.fullmatch(text):
        return StartingPosition("ulid", parse_ulid(text, what="startingPosition"), text)
    moment = _parse_timestamp(text)
    if moment is None:
        if len(text) == 26 or re.fullmatch(r"[0-9A-Za-z]{20,32}", text):
            parse_ulid(text, what="startingPosition")  # raises with the ULID reason
        raise ChangefeedSourceError(
            f"startingPosition {text!r} is not understood: use 'beginning', 'now', a "
            "26-character ULID or an ISO-8601 timestamp such as 2024-05-01T12:00:00Z"
        )
    return StartingPosition("timestamp", timestamp_cursor(moment), text)


def _parse_timestamp(text: str) -> datetime | None:
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        return datetime.fromisoformat(candidate)
    except ValueError:
        return None


def encode_offset(cursors: dict[int, bytes], *, initial: bool = False) -> dict[str, Any]:
    """The JSON-able offset of per-shard cursors (shards in numeric order).

    ``initial`` marks a stream's initial offset: it differs from every later offset, so
    Spark always runs (and logs in its checkpoint) a first micro-batch, even an empty
    one, and a restart never re-evaluates a starting position such as ``now``.
    """
    offset: dict[str, Any] = {
        "version": OFFSET_VERSION,
        "cursors": {str(shard): to_hex(cursors[shard]) for shard in sorted(cursors)},
    }
    if initial:
        offset["initial"] = True
    return offset


def decode_offset(offset: dict[str, Any] | str, *, what: str = "offset") -> dict[int, bytes]:
    """Per-shard cursors from an offset (a dict, or its JSON text)."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except json.JSONDecodeError as exc:
            raise ChangefeedSourceError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(offset, dict):
        raise ChangefeedSourceError(f"{what} must be a JSON object, got {offset!r}")
    if "cursors" in offset:
        version = offset.get("version", OFFSET_VERSION)
        if version != OFFSET_VERSION:
            raise ChangefeedSourceError(
                f"{what} has version {version!r}; this changefeed understands version "
                f"{OFFSET_VERSION} (was the checkpoint written by a newer changefeed?)"
            )
        cursors = offset["cursors"]
    else:  # the short form {"0": "<hex>", ...} accepted in options
        cursors = offset
    if not isinstance(cursors, dict):
        raise ChangefeedSourceError(f"{what}: 'cursors' must be an object of shard -> hex")
    result: dict[int, bytes] = {}
    for shard, cursor in cursors.items():
        try:
            shard_id = int(shard)
        except (TypeError, ValueError):
            raise ChangefeedSourceError(f"{what}: shard {shard!r} is not an integer") from None
        text = str(cursor)
        result[shard_id] = (
            parse_ulid(text, what=f"{what} shard {shard_id}")
            if len(text) == 26
            else from_hex(text, what=f"{what} shard {shard_id}")
        )
    return result
