"""A feed and its database's connection as the reads see them: the values that cross
from a dialect to the Spark source, the landing and the snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from changefeed.client.core import FeedInfo, redact
from changefeed.dialects.rows import Column, RowLayout

#: One row of a page, shaped as the feed's :class:`RowLayout`.
Row = tuple[Any, ...]


@dataclass(frozen=True)
class SourceFeed:
    """A feed as a read needs it: its registry entry (the client's :class:`FeedInfo`)
    and, with ``payload=true``, the source table's columns. Picklable: it travels in
    partitions."""

    info: FeedInfo
    payload: tuple[Column, ...] | None = None
    images: bool = False
    """Whether the feed table has row image columns (``row_image: true`` now or before):
    events with an image take their payload from it instead of the source (O7)."""

    @property
    def feed_id(self) -> str:
        return self.info.feed_id

    @property
    def mode(self) -> str:
        return self.info.mode

    @property
    def dialect(self) -> str:
        return self.info.dialect

    @property
    def changefeed_schema(self) -> str:
        return self.info.schema

    @property
    def names(self) -> Mapping[str, str]:
        return self.info.names

    @property
    def keys(self) -> tuple[Column, ...]:
        return tuple(Column(k.name, k.data_type) for k in self.info.keys)

    def name(self, kind: str) -> str:
        return self.info.name(kind)

    def layout(self) -> RowLayout:
        return RowLayout(self.dialect, self.keys, self.payload)


@dataclass(frozen=True)
class Connection:
    """A parsed connection URI. ``uri`` keeps the original text (with any password)."""

    dialect: str
    uri: str

    @property
    def display(self) -> str:
        return redact(self.uri)
