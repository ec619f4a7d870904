"""The exceptions of changefeed: one root, :class:`ChangefeedError`, and the refusals of
the feed routines, each with its codes on both databases.

Every exception the package raises derives from :class:`ChangefeedError`, so one
``except changefeed.ChangefeedError`` catches them all; a class that was a ``ValueError``
or a ``RuntimeError`` before the root existed keeps that base as a mixin, so older
``except ValueError`` clauses still catch it.

A refusal of a feed routine carries the codes it has on each database: ``sqlstate``
(PostgreSQL, class ``CF``, docs/postgres.md) and ``sqlserver_errors`` (the ``THROW``
numbers of docs/sqlserver.md, "Error numbers"). The clients' translation tables
(:func:`changefeed.client.errors.translate`, :func:`changefeed.dialects.sqlserver.client.translate`)
are built from these attributes, so a code has one place.

This module imports nothing: the ULID kernels, the Spark modules and the clients all
derive from it without pulling in each other's dependencies.

>>> issubclass(LockBurned, ChangefeedError), LockBurned.sqlstate, LockBurned.retryable
(True, 'CF002', True)
>>> by_sqlstate()["CF013"] is FellBehindRetention
True
>>> by_sqlserver_error()[51062] is FellBehindRetention
True
"""

from __future__ import annotations

from typing import ClassVar


class ChangefeedError(Exception):
    """The root of every exception changefeed raises.

    ``retryable`` says whether running the whole transaction again can succeed (a burned
    lock or an abandoned write; the client has already rolled back). ``cause`` is the
    driver's own exception when a database refusal was translated, else None.
    """

    #: PostgreSQL's SQLSTATE of the refusal (``CF0nn``), None where the class has none.
    sqlstate: ClassVar[str | None] = None
    #: SQL Server's error numbers of the refusal (51000-51999), empty where it has none.
    sqlserver_errors: ClassVar[tuple[int, ...]] = ()
    retryable: ClassVar[bool] = False

    def __init__(self, *args: object, cause: BaseException | None = None) -> None:
        super().__init__(*args)
        self.cause = cause


# -- refusals of the feed routines (docs/postgres.md, docs/sqlserver.md) -------------------


class WriteAbandoned(ChangefeedError):
    """CF001: the write was tombstoned by a reader or reaped after a stall."""

    sqlstate = "CF001"
    sqlserver_errors = (51012, 51014)
    retryable = True


class LockBurned(ChangefeedError):
    """CF002: the shard's lock was burned after a stall, or its state moved."""

    sqlstate = "CF002"
    sqlserver_errors = (51013,)
    retryable = True


class UlidRangeError(ChangefeedError):
    """CF003: a ULID offset outside the transaction's block (more than 2^36 events)."""

    sqlstate = "CF003"


class NoWriteInProgress(ChangefeedError):
    """CF004: ``ulid``/``update_state`` without a ``lock`` on this connection."""

    sqlstate = "CF004"
    sqlserver_errors = (51010,)


class LockInTransaction(ChangefeedError):
    """CF005: ``lock`` was called inside a transaction block."""

    sqlstate = "CF005"
    sqlserver_errors = (51001, 51015, 51020, 51040, 51071)


class WriteInProgress(ChangefeedError):
    """CF006: ``lock`` while this connection already has a write open."""

    sqlstate = "CF006"
    sqlserver_errors = (51006,)


class WriteTransactionBroken(ChangefeedError):
    """The body of ``write()`` ended the write's transaction itself (a ``COMMIT`` or
    ``ROLLBACK`` sent as SQL) or, on SQL Server, left a ``BEGIN TRANSACTION`` of its own
    open (error 51072): the write is rolled back and released; what a ``COMMIT`` of the
    body committed stays committed. A body's own transactions must nest inside the
    write's (docs/python-api.md, "Transactions in the body")."""

    sqlserver_errors = (51072,)


class InvalidArgument(ChangefeedError):
    """CF007: an argument out of range (null shard, time hint outside the ULID range, ...)."""

    sqlstate = "CF007"
    sqlserver_errors = (51002, 51003, 51004, 51023, 51045, 51057, 51058, 51063, 51065, 51070)


class SetupConflict(ChangefeedError):
    """CF008: setup/upgrade found a feed registered differently."""

    sqlstate = "CF008"
    sqlserver_errors = (51051, 51052, 51053, 51054, 51055, 51059, 51073)


class CannotConnect(ChangefeedError):
    """The database cannot be reached, or its connection URI cannot be used."""


class DriverMissing(CannotConnect):
    """The database's Python driver is not installed; the message names the extra."""


class CaptureLost(ChangefeedError):
    """CF011: a ``capture: trigger`` source lost its triggers (re-created without setup), or
    would arrive with rows that no event records (51074 on SQL Server)."""

    sqlstate = "CF011"
    sqlserver_errors = (51068, 51074)


class WriteOutsideBlock(ChangefeedError):
    """CF012: a blocking writer inserted a row outside its shard or its allocated block."""

    sqlstate = "CF012"
    sqlserver_errors = (51066,)


class FellBehindRetention(ChangefeedError, RuntimeError):
    """CF013: a reader's cursor lies below events that retention removed (protocol 8.1
    for a database feed, 11.7 for a Spark feed table): reading on would skip events.

    A database feed's reader re-snapshots (copies the source table again and continues
    from the shard's current safe point); a dbt consumer of a Spark feed table is
    rebuilt with ``dbt run --full-refresh``. The events between the cursor and the
    retention horizon are gone. (``RuntimeError`` is a mixin: the Spark feed table's
    check raised a ``RuntimeError`` before this class was shared.)
    """

    sqlstate = "CF013"
    sqlserver_errors = (51062,)


class FeedNotFound(ChangefeedError):
    """The feed is not in the registry (or the registry does not exist)."""

    sqlserver_errors = (51056,)


class NeedsUpgrade(ChangefeedError):
    """The feed was set up by an older package that lacks the operation: run
    ``upgrade_feed`` (it re-creates the routines and keeps the data)."""


class WrongMode(ChangefeedError):
    """The operation needs the other mode (e.g. ``write`` on an outbox feed)."""


class BarrierTimeout(ChangefeedError):
    """``barrier_wait`` gave up before the barrier was released."""


# -- reading a feed from Spark (changefeed.spark.source, the landing, the dialects) -------


class ChangefeedSourceError(ChangefeedError, ValueError):
    """A feed cannot be read as asked; the message names the cause and the fix.

    Raised for a missing or bad option, an unknown feed, a bad ULID or offset, and an
    unreachable database. Inside Spark it reaches the user wrapped in Spark's own
    exception, with this message in its text. Exported by :mod:`changefeed.spark.source`.
    """


def _refusals() -> list[type[ChangefeedError]]:
    found: list[type[ChangefeedError]] = []
    pending = list(ChangefeedError.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def by_sqlstate() -> dict[str, type[ChangefeedError]]:
    """Each PostgreSQL SQLSTATE, mapped to the class that declares it (a subclass that
    only inherits a code does not take it over)."""
    return {vars(c)["sqlstate"]: c for c in _refusals() if vars(c).get("sqlstate")}


def by_sqlserver_error() -> dict[int, type[ChangefeedError]]:
    """Each SQL Server error number, mapped to the class that declares it."""
    return {n: c for c in _refusals() for n in vars(c).get("sqlserver_errors", ())}
