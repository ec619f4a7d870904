"""Vectorized ULID kernels over numpy row matrices (numpy only, no Spark).

Every array function takes and returns 2-D ``uint8`` matrices with one value per row:
``(n, 16)`` binary ULIDs, ``(n, 26)`` base32 text, ``(n, 36)`` UUID text. No function
loops over rows in Python. Arrow adapters live in :mod:`changefeed.ulid.arrow`.

>>> from changefeed.ulid import decode_one, encode_one
>>> encode_one(decode_one("01ARZ3NDEKTSV4RRFFQ69G5FAV"))
'01ARZ3NDEKTSV4RRFFQ69G5FAV'
"""

from changefeed.ulid._codec import decode, decode_valid, encode
from changefeed.ulid._constants import (
    ALPHABET,
    LOW_HEADROOM_BIT,
    MAX_TIMESTAMP_MS,
    ULID_BYTES,
    ULID_CHARS,
    UUID_CHARS,
)
from changefeed.ulid._errors import InvalidULID, text_reason, uuid_reason
from changefeed.ulid._generate import MAX_BATCH, generate
from changefeed.ulid._layout import from_parts, order_keys, timestamp, timestamp_ms, to_parts
from changefeed.ulid._scalar import (
    decode_one,
    encode_one,
    from_hex_one,
    parse_one,
    previous_one,
    timestamp_ms_one,
    timestamp_one,
    to_hex_one,
)
from changefeed.ulid._uuid import from_uuid, from_uuid_valid, to_uuid

__all__ = [
    "ALPHABET",
    "LOW_HEADROOM_BIT",
    "MAX_BATCH",
    "MAX_TIMESTAMP_MS",
    "ULID_BYTES",
    "ULID_CHARS",
    "UUID_CHARS",
    "InvalidULID",
    "decode",
    "decode_one",
    "decode_valid",
    "encode",
    "encode_one",
    "from_hex_one",
    "from_parts",
    "from_uuid",
    "from_uuid_valid",
    "generate",
    "order_keys",
    "parse_one",
    "previous_one",
    "text_reason",
    "timestamp",
    "timestamp_ms",
    "timestamp_ms_one",
    "timestamp_one",
    "to_hex_one",
    "to_parts",
    "to_uuid",
    "uuid_reason",
]
