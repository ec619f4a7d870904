"""What PostgresFeed and SqlServerFeed share: the result types, the write in progress's
common part and the client's frame (the cached registry entry, the mode check, waiting for
a barrier)."""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from changefeed.client import checks as _checks
from changefeed.client.core import ZERO_ULID, FeedInfo
from changefeed.client.errors import BarrierTimeout, NeedsUpgrade, WrongMode

#: A pending write's id as ``safe_point`` reports it: PostgreSQL's is an int, SQL Server's a
#: uuid (or its text). Each client refuses the other's kind with :class:`InvalidArgument`.
WriteId = int | uuid.UUID | str


@dataclass(frozen=True)
class Event:
    """One event of a feed: which row of the source table changed, and its ULID; on a feed
    with row images (``row_image: true``) also the row as of the event: ``image`` (the
    row's columns, or None) and ``deleted`` (True for a delete, None: no image)."""

    shard_id: int
    ulid: bytes
    key: tuple[Any, ...]
    image: Mapping[str, Any] | None = None
    deleted: bool | None = None

    @property
    def ulid_text(self) -> str:
        """The ULID as 26 characters of Crockford base32.

        >>> Event(0, bytes.fromhex("01563e3ab5d3d6764c61efb99302bd5b"), (1,)).ulid_text
        '01ARZ3NDEKTSV4RRFFQ69G5FAV'
        """
        from changefeed.ulid import encode_one

        return encode_one(self.ulid)


@dataclass(frozen=True)
class Page:
    """A page of events, ending at a transaction boundary; ``cursor`` is where to resume."""

    events: list[Event]
    cursor: bytes
    moved: int = 0
    """Outbox rows this call moved into the feed before reading (outbox mode)."""


@dataclass(frozen=True)
class SafePoint:
    """``safe_point`` (read up to here), ``head`` (end of the last allocated block, writes
    in flight included) and the number of pending writes."""

    safe_point: bytes
    head: bytes
    pending: int


@dataclass(frozen=True)
class Retained:
    """What ``retain`` (PostgresFeed, SqlServerFeed) did on one shard."""

    shard_id: int
    removed: int
    """Events removed by this call."""
    horizon: bytes | None
    """The newest ULID retention ever removed from the shard (readers below it fail)."""
    held_for_consumers: int
    """Events the policy would remove but a registered consumer's cursor kept."""
    slowest_consumer: str | None
    """The registered consumer with the lowest cursor on the shard, if any."""

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Retained:
        """From a row of ``retain``: shard_id, removed, horizon, held_for_consumers,
        slowest_consumer."""
        return cls(
            shard_id=int(row[0]),
            removed=int(row[1]),
            horizon=None if row[2] is None else bytes(row[2]),
            held_for_consumers=int(row[3]),
            slowest_consumer=None if row[4] is None else str(row[4]),
        )


@dataclass(frozen=True)
class Snapshot:
    """One request of ``snapshot:<feed>`` (protocol 12.1): the block ``snapshot_begin``
    reserved in a shard (``first_ulid`` to ``last_ulid``), the key range (inclusive JSON
    arrays, None: unbounded) and, once a landing called ``snapshot_finish``, when and with
    how many rows. Times are UTC."""

    snapshot_id: int
    shard_id: int
    first_ulid: bytes
    last_ulid: bytes
    key_from: str | None
    key_to: str | None
    requested_at: datetime
    finished_at: datetime | None
    rows_landed: int | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Snapshot:
        """From a row of the table, its columns in order."""
        return cls(
            snapshot_id=int(row[0]),
            shard_id=int(row[1]),
            first_ulid=bytes(row[2]),
            last_ulid=bytes(row[3]),
            key_from=None if row[4] is None else str(row[4]),
            key_to=None if row[5] is None else str(row[5]),
            requested_at=row[6],
            finished_at=row[7],
            rows_landed=None if row[8] is None else int(row[8]),
        )


@dataclass(frozen=True)
class Barrier:
    """A read barrier (protocol section 7): wait until the safe point reaches ``position``."""

    shard_id: int
    position: bytes
    outbox_sequence: int | None


@dataclass(kw_only=True)
class BlockWrite:
    """A blocking write in progress, on any backend: the shard, the block its lock call
    allocated (``ulid_high`` and ``block_start``), the SQL expression numbering its events
    (``ulid_sql``) and the feed table to insert them into."""

    conn: Any = field(repr=False)
    info: FeedInfo = field(repr=False)
    shard_id: int
    ulid_high: bytes
    block_start: int
    ulid_sql: str
    feed_table: str
    events: int = 0
    """Events inserted through ``insert_events`` so far."""

    @property
    def first_ulid(self) -> bytes:
        """The first ULID of this write's block (events get it and the ones after).

        >>> BlockWrite(conn=None, info=None, shard_id=0, ulid_high=bytes(8), block_start=-1,
        ...            ulid_sql="", feed_table="").first_ulid.hex()
        '0000000000000000ffffffffffffffff'
        """
        return self.ulid_high + self.block_start.to_bytes(8, "big", signed=True)

    def _checked_keys(self, keys: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """``keys`` as tuples of the feed's key width, none of them None (InvalidArgument)."""
        names = self.info.key_names
        return _checks.keys(keys, len(names), names)


_Client = TypeVar("_Client", bound="FeedClient")


class FeedClient(ABC):
    """One feed in one database; each dialect's subclass reads its registry entry and calls
    its routines (:class:`~changefeed.client.PostgresFeed`,
    :class:`~changefeed.client.SqlServerFeed`), with the same methods and signatures.

    ``feed_id`` is the unquoted ``schema.table`` of the source table; ``schema`` the
    changefeed schema (the dbt var ``changefeed_schema``, default ``changefeed``).
    The instance holds no connection; every method takes one.
    """

    def __init__(self, feed_id: str, schema: str = "changefeed") -> None:
        self.feed_id = feed_id
        self.schema = schema
        self._info: FeedInfo | None = None

    @classmethod
    def from_info(cls: type[_Client], info: FeedInfo) -> _Client:
        """The client of a feed whose registry entry the caller has already read: its
        methods use ``info`` instead of reading the registry again (one round trip less
        per call on a new client)."""
        client = cls(info.feed_id, info.schema)
        client._info = info
        return client

    @abstractmethod
    def _load(self, conn: Any) -> FeedInfo: ...

    # -- what each dialect implements (docs/python-api.md) -------------------------------

    @abstractmethod
    def write(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
    ) -> AbstractContextManager[BlockWrite]:
        """One write transaction on ``shard`` (blocking mode): lock, body, publish."""

    @abstractmethod
    def lock(
        self,
        conn: Any,
        shard: int,
        time_hint: datetime | None = None,
        *,
        stall_timeout_ms: int | None = None,
        lock_probe_ms: int | None = None,
        begin: bool = True,
    ) -> BlockWrite:
        """Step 1 of a write by hand: take the shard's lock and open a write."""

    @abstractmethod
    def release(self, conn: Any) -> bool:
        """Abandon this connection's write and release its lock; whether there was one."""

    @abstractmethod
    def ulid_sql(self, conn: Any) -> str:
        """The SQL expression that numbers a write's events (blocking mode)."""

    @abstractmethod
    def outbox_sql(self, conn: Any, with_time_hint: bool = False) -> str:
        """The insert statement of outbox rows (outbox mode)."""

    @abstractmethod
    def insert_outbox(
        self,
        conn: Any,
        shard: int,
        keys: Iterable[Sequence[Any]],
        time_hint: datetime | None = None,
    ) -> int:
        """Insert outbox rows in the caller's transaction (outbox mode)."""

    @abstractmethod
    def read_page(
        self, conn: Any, shard: int, cursor: bytes = ZERO_ULID, page_size: int = 1000
    ) -> Page:
        """The events of ``shard`` after ``cursor`` up to the safe point, one page."""

    @abstractmethod
    def safe_point(self, conn: Any, shard: int) -> SafePoint:
        """The shard's safe point and its oldest pending write."""

    @abstractmethod
    def tombstone(self, conn: Any, shard: int, session_id: int, write_id: WriteId) -> bool:
        """Abandon a stale pending write; whether this call won over its commit."""

    def info(self, conn: Any) -> FeedInfo:
        """The feed's registry entry (mode, keys, names); read once, then cached."""
        if self._info is None:
            self._info = self._load(conn)
        return self._info

    def refresh(self, conn: Any) -> FeedInfo:
        """Re-read the registry entry (after ``upgrade_feed`` renamed something)."""
        self._info = None
        return self.info(conn)

    # -- retention (protocol 8.1): the checks here, the statements in each dialect's hooks

    def save_cursor(self, conn: Any, consumer: str, shard: int, cursor: bytes) -> None:
        """Register ``consumer``'s cursor on ``shard``: retention keeps every event after it
        (unless overridden). Call it after the output and cursor are stored durably; a
        consumer registered on some shards keeps every event of its other shards.
        A cursor below the retention horizon raises :class:`FellBehindRetention`."""
        consumer = _checks.consumer(consumer)
        shard = _checks.shard(shard)
        cursor = _checks.ulid(cursor, "cursor")
        self._save_cursor(conn, self._retention_info(conn, "save_cursor"), consumer, shard, cursor)

    def forget_consumer(self, conn: Any, consumer: str) -> int:
        """Unregister ``consumer`` (every shard); returns how many cursors were removed."""
        consumer = _checks.consumer(consumer)
        return self._forget_consumer(conn, self._retention_info(conn, "forget_consumer"), consumer)

    def consumers(self, conn: Any) -> list[tuple[str, int, bytes]]:
        """Registered cursors as ``(consumer, shard, cursor)``, by consumer and shard."""
        info = self.info(conn)
        if "consumer" not in info.names:
            return []
        return [(str(r[0]), int(r[1]), bytes(r[2])) for r in self._consumer_rows(conn, info)]

    def retention_horizon(self, conn: Any, shard: int) -> bytes | None:
        """The newest ULID retention removed from ``shard`` (a reader whose cursor lies
        below it fails), or ``None`` if retention never removed an event there."""
        shard = _checks.shard(shard)
        info = self.info(conn)
        if "retention" not in info.names:
            return None
        return self._horizons(conn, info, [shard]).get(shard)

    def retain(
        self,
        conn: Any,
        max_age: timedelta | None = None,
        keep_last: int | None = None,
        override_consumers: bool = False,
        shard: int | None = None,
    ) -> list[Retained]:
        """Remove events by a policy, per shard (every shard, or ``shard``): those at or
        below the safe point that are older than ``max_age`` (by their ULID's time) and
        not in the block of one of the newest ``keep_last`` events (a rule left out keeps
        nothing by itself; give at least one), and, unless ``override_consumers``, at or
        below every registered consumer's cursor. Runs as the feed's owner (the reader
        and writer roles may not). Readers whose cursor lies below what was removed then
        fail with :class:`FellBehindRetention`.
        """
        policy = _checks.retention_policy(max_age, keep_last, override_consumers, shard)
        rows = self._retain_rows(conn, self._retention_info(conn, "retain"), *policy)
        return [Retained.from_row(r) for r in rows]

    def _save_cursor(
        self, conn: Any, info: FeedInfo, consumer: str, shard: int, cursor: bytes
    ) -> None:
        raise NotImplementedError

    def _forget_consumer(self, conn: Any, info: FeedInfo, consumer: str) -> int:
        raise NotImplementedError

    def _consumer_rows(self, conn: Any, info: FeedInfo) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    def _horizons(self, conn: Any, info: FeedInfo, shards: Sequence[int]) -> dict[int, bytes]:
        raise NotImplementedError

    def _retain_rows(
        self,
        conn: Any,
        info: FeedInfo,
        max_age_ms: int | None,
        keep_last: int | None,
        override_consumers: bool,
        shard: int | None,
    ) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    def _retention_info(self, conn: Any, operation: str) -> FeedInfo:
        """The registry entry, if the feed has retention's routines (protocol 8.1)."""
        return self._info_with(
            conn, "retain", operation, "retention", "retention routines and tables"
        )

    # -- snapshots (protocol 12.1): the checks here, the statements in each dialect's hooks

    def snapshot_begin(
        self,
        conn: Any,
        shard: int,
        key_from: Sequence[Any] | None = None,
        key_to: Sequence[Any] | None = None,
    ) -> Snapshot:
        """Request a snapshot of ``shard``: reserve the next block of the shard, empty, and
        record the request (``snapshot_begin``). ``key_from`` and ``key_to`` bound the key
        range, inclusive: a list of one value per key column, None for no bound. The
        reserved block lies above every block allocated before and below every one after,
        so every change committed later gets an event above it (protocol 12, P3). The
        request is committed before this returns, so the connection must not be inside a
        transaction (:class:`LockInTransaction`; on SQL Server it must be in autocommit
        mode). The next landing of the feed executes the request (``changefeed
        snapshot``; pending ones: :meth:`snapshots`).
        """
        info = self._snapshot_info(conn, "snapshot_begin")
        shard = _checks.shard(shard)
        bounds = [_checks.key_bound(b, info.key_names, w)
                  for b, w in ((key_from, "key_from"), (key_to, "key_to"))]  # fmt: skip
        self._outside_transaction(conn, "snapshot_begin commits the request before it returns")
        snapshot_id = self._snapshot_begin(conn, info, shard, bounds[0], bounds[1])
        return self._snapshot_rows(conn, info, snapshot_id=snapshot_id)[0]

    def snapshot_finish(self, conn: Any, snapshot_id: int, rows_landed: int) -> bool:
        """Mark request ``snapshot_id`` finished with ``rows_landed`` rows
        (``snapshot_finish``): True if this call finished it, False if it was finished
        before. An unknown request raises :class:`InvalidArgument`."""
        info = self._snapshot_info(conn, "snapshot_finish")
        snapshot_id = _checks.integer(snapshot_id, "snapshot_id")
        rows_landed = _checks.integer(rows_landed, "rows_landed", 0)
        return self._snapshot_finish(conn, info, snapshot_id, rows_landed)

    def snapshots(self, conn: Any, pending_only: bool = False) -> list[Snapshot]:
        """The feed's snapshot requests, oldest first (``pending_only``: not finished);
        empty for a feed set up without snapshots (it has none)."""
        info = self.info(conn)
        if "snapshot" not in info.names:
            return []
        return self._snapshot_rows(conn, info, pending_only=pending_only)

    def _outside_transaction(self, conn: Any, why: str) -> None:
        """Raise :class:`LockInTransaction` (naming ``why``) if ``conn`` is in a transaction."""
        raise NotImplementedError

    def _snapshot_begin(
        self, conn: Any, info: FeedInfo, shard: int, key_from: str | None, key_to: str | None
    ) -> int:
        raise NotImplementedError

    def _snapshot_finish(self, conn: Any, info: FeedInfo, snapshot_id: int, rows: int) -> bool:
        raise NotImplementedError

    def _snapshot_rows(
        self,
        conn: Any,
        info: FeedInfo,
        *,
        snapshot_id: int | None = None,
        pending_only: bool = False,
    ) -> list[Snapshot]:
        """The requests (one, or the pending ones, or all), times as naive UTC."""
        raise NotImplementedError

    def _snapshot_info(self, conn: Any, operation: str) -> FeedInfo:
        """The registry entry, if the feed has the snapshot routines (protocol 12.1)."""
        return self._info_with(
            conn, "snapshot_begin", operation, "snapshots", "snapshot table and routines"
        )

    def _info_with(self, conn: Any, kind: str, operation: str, feature: str, adds: str) -> FeedInfo:
        """The registry entry, if the feed has the object ``kind``; else
        :class:`NeedsUpgrade`: set up by a package without ``feature``."""
        info = self.info(conn)
        if kind not in info.names:
            raise NeedsUpgrade(
                f"feed {self.feed_id} was set up by a package without {feature}, so it has no "
                f"{operation}: run `dbt run-operation changefeed.upgrade_feed` with its config "
                f"(it adds the {adds} and keeps the data)"
            )
        return info

    # -- health (what `changefeed status` reports beyond the safe point) -------------------

    def shards(self, conn: Any) -> list[int]:
        """Shards with a state row, and in outbox mode shards with unmoved outbox rows."""
        raise NotImplementedError

    def outbox_rows(self, conn: Any, shard: int) -> int | None:
        """Rows of ``shard`` waiting in the outbox (outbox mode; else :class:`WrongMode`);
        ``None`` where this user may not read the outbox (SQL Server's reader role)."""
        raise NotImplementedError

    def capture_state(self, conn: Any) -> tuple[str, bool | None]:
        """The feed's capture, ``"trigger"`` or ``"none"``, and with ``capture: trigger``
        whether the source lost its capture (its triggers are missing or disabled, or the
        table was re-created): what reads refuse with :class:`CaptureLost`. ``None`` for
        a feed without capture."""
        raise NotImplementedError

    def oldest_pending_age(self, conn: Any, shard: int) -> float | None:
        """Seconds since the shard's oldest pending write started (0.0 when none), by the
        database's clock; ``None`` where this user may not read the session table
        (PostgreSQL's reader role)."""
        raise NotImplementedError

    def unread(self, conn: Any, shard: int, after: bytes, upto: bytes) -> tuple[int, bytes | None]:
        """How many events of ``shard`` lie in ``(after, upto]``, and the first one's ULID
        (``None`` when there is none): a consumer's lag from its cursor to the safe point."""
        raise NotImplementedError

    def barrier_acquire(self, conn: Any, shard: int) -> Barrier:
        raise NotImplementedError

    def barrier_check(self, conn: Any, barrier: Barrier) -> bool:
        raise NotImplementedError

    def move_outbox(self, conn: Any, shard: int, max_rows: int = 10000) -> int:
        raise NotImplementedError

    def barrier_wait(
        self,
        conn: Any,
        shard: int,
        timeout_s: float = 10.0,
        *,
        barrier: Barrier | None = None,
        poll_s: float = 0.005,
    ) -> Barrier:
        """Acquire a barrier (unless given one) and wait until it is released.

        In outbox mode the outbox is moved while waiting, so the wait does not depend on
        another reader. Raises :class:`BarrierTimeout` after ``timeout_s``.

        >>> # feed.barrier_wait(conn, shard=0); then read_page(...) includes your commits
        """
        info = self.info(conn)
        barrier = barrier if barrier is not None else self.barrier_acquire(conn, shard)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.barrier_check(conn, barrier):
                return barrier
            if info.mode == "outbox":
                self.move_outbox(conn, shard)
                if self.barrier_check(conn, barrier):
                    return barrier
            if time.monotonic() >= deadline:
                raise BarrierTimeout(
                    f"feed {self.feed_id} shard {shard}: the barrier at "
                    f"{barrier.position.hex()} was not released within {timeout_s} s"
                )
            time.sleep(poll_s)

    def _require(self, conn: Any, mode: str, operation: str) -> FeedInfo:
        info = self.info(conn)
        if info.mode != mode:
            raise WrongMode(
                f"{operation} is for {mode} mode, but feed {self.feed_id} is in {info.mode} mode"
            )
        return info
