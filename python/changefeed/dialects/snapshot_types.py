"""What a snapshot's parts share (docs/protocol.md section 12): a request and its chunks,
the terms of a chunk's predicate, and the stored key bounds. The bottom of the snapshot
modules: each dialect's ``snapshot`` module and the landing's planning and execution
(``changefeed.spark.landing``) import it; it imports none of them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from changefeed.client.feed import FeedClient, Snapshot
from changefeed.dialects.feed import SourceFeed
from changefeed.errors import ChangefeedError, ChangefeedSourceError


@dataclass(frozen=True)
class SnapshotRequest:
    """One row of ``snapshot:<feed>``: ``key_from``/``key_to`` are inclusive bounds, one
    value per key column (None: unbounded)."""

    snapshot_id: int
    shard: int
    first_ulid: bytes
    last_ulid: bytes
    key_from: tuple[Any, ...] | None
    key_to: tuple[Any, ...] | None


@dataclass(frozen=True)
class Chunk:
    """A key range read by one task: ``lower`` (inclusive or not) to ``upper``."""

    index: int
    lower: tuple[str, ...] | None
    lower_inclusive: bool
    upper: tuple[str, ...] | None
    upper_inclusive: bool


def chunk_terms(
    shard_sql: str | None,
    shard: int,
    chunk: Chunk,
    compare: Callable[[str, Sequence[Any]], tuple[str, list[Any]]],
) -> tuple[list[str], list[Any]]:
    """The terms of a chunk's predicate and their parameters: the shard expression's
    shard (capture: trigger feeds; ``shard_sql`` is the expression as the driver's
    placeholders need it, :func:`pg_text`), then each key bound as ``compare(op, bound)``
    writes it (the key compared with the bound by ``op``)."""
    terms: list[str] = []
    params: list[Any] = []
    if shard_sql is not None:
        terms.append(f"({shard_sql}) = %s")
        params.append(shard)
    bounds = (
        (chunk.lower, ">=" if chunk.lower_inclusive else ">"),
        (chunk.upper, "<=" if chunk.upper_inclusive else "<"),
    )
    for bound, op in bounds:
        if bound is not None:
            sql, values = compare(op, bound)
            terms.append(sql)
            params += values
    return terms, params


def decode_bound(raw: Any, names: Sequence[str], what: str) -> tuple[Any, ...] | None:
    """A stored ``key_from``/``key_to`` (JSON text, or the driver's decoded JSON) as a tuple
    of one value per key column, None when unbounded."""
    if raw is None:
        return None
    values = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(values, list) or len(values) != len(names):
        raise ChangefeedSourceError(
            f"{what} must be a JSON array of {len(names)} value(s) (the key "
            f"{', '.join(names)}), got {raw!r}"
        )
    return tuple(values)


def snapshot_table(info: SourceFeed) -> str:
    """The feed's ``snapshot`` table; a feed set up without snapshots is refused, naming
    the upgrade that adds them."""
    if "snapshot_begin" not in info.names:
        raise ChangefeedSourceError(
            f"feed {info.feed_id} was set up by a package without snapshots: run "
            "`dbt run-operation changefeed.upgrade_feed` (or setup_feed) for it first; it "
            "adds the snapshot table and routines and keeps the data"
        )
    return info.info.q("snapshot")


class ClientRequests:
    """The requests' side of a dialect's statements, through its feed client
    (``snapshot_begin``, ``snapshots``, ``snapshot_finish``: the same methods on
    :class:`~changefeed.client.PostgresFeed` and :class:`~changefeed.client.SqlServerFeed`),
    their errors as the data source's."""

    feed_class: ClassVar[type[FeedClient]]

    def pending_requests(self, conn: Any, info: SourceFeed) -> list[SnapshotRequest]:
        with _translated():
            found = self._feed(info).snapshots(conn, pending_only=True)
        return [_request(s, info) for s in found]

    def request(
        self, conn: Any, info: SourceFeed, shard: int, key_from: str | None, key_to: str | None
    ) -> SnapshotRequest:
        bounds = [None if b is None else json.loads(b) for b in (key_from, key_to)]
        with _translated():
            made = self._feed(info).snapshot_begin(conn, shard, *bounds)
        return _request(made, info)

    def finish(self, conn: Any, info: SourceFeed, request: SnapshotRequest, rows: int) -> None:
        with _translated():
            self._feed(info).snapshot_finish(conn, request.snapshot_id, rows)

    def _feed(self, info: SourceFeed) -> FeedClient:
        # The landing has just read the registry entry: no second read per run.
        return type(self).feed_class.from_info(info.info)


def _request(found: Snapshot, info: SourceFeed) -> SnapshotRequest:
    names = [k.name for k in info.keys]
    return SnapshotRequest(
        found.snapshot_id,
        found.shard_id,
        found.first_ulid,
        found.last_ulid,
        decode_bound(found.key_from, names, "key_from"),
        decode_bound(found.key_to, names, "key_to"),
    )


@contextmanager
def _translated() -> Iterator[None]:
    """The client's errors as the data source's (their messages name cause and fix)."""
    try:
        yield
    except ChangefeedSourceError:
        raise  # already the data source's (every error derives from ChangefeedError)
    except ChangefeedError as exc:
        raise ChangefeedSourceError(str(exc)) from None
