"""Python exceptions for the feed procedures' SQLSTATEs (class ``CF``, docs/postgres.md)."""

from __future__ import annotations

from typing import Any, ClassVar


class ChangefeedError(Exception):
    """A changefeed procedure refused: ``sqlstate`` is its ``CF00x`` code.

    ``retryable`` says whether running the whole transaction again can succeed
    (a burned lock or an abandoned write); the client has already rolled back.
    """

    sqlstate: ClassVar[str | None] = None
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class WriteAbandoned(ChangefeedError):
    """CF001: the write was tombstoned by a reader or reaped after a stall."""

    sqlstate = "CF001"
    retryable = True


class LockBurned(ChangefeedError):
    """CF002: the shard's lock was burned after a stall, or its state moved."""

    sqlstate = "CF002"
    retryable = True


class UlidRangeError(ChangefeedError):
    """CF003: a ULID offset outside the transaction's block (more than 2^36 events)."""

    sqlstate = "CF003"


class NoWriteInProgress(ChangefeedError):
    """CF004: ``ulid``/``update_state`` without a ``lock`` on this connection."""

    sqlstate = "CF004"


class LockInTransaction(ChangefeedError):
    """CF005: ``lock`` was called inside a transaction block."""

    sqlstate = "CF005"


class WriteInProgress(ChangefeedError):
    """CF006: ``lock`` while this connection already has a write open."""

    sqlstate = "CF006"


class WriteTransactionBroken(ChangefeedError):
    """The body of ``write()`` ended the write's transaction itself (a ``COMMIT`` or
    ``ROLLBACK`` sent as SQL) or, on SQL Server, left a ``BEGIN TRANSACTION`` of its own
    open (error 51072): the write is rolled back and released; what a ``COMMIT`` of the
    body committed stays committed. A body's own transactions must nest inside the
    write's (docs/python-api.md, "Transactions in the body")."""


class InvalidArgument(ChangefeedError):
    """CF007: an argument out of range (null shard, time hint outside the ULID range, ...)."""

    sqlstate = "CF007"


class SetupConflict(ChangefeedError):
    """CF008: setup/upgrade found a feed registered differently."""

    sqlstate = "CF008"


class CannotConnect(ChangefeedError):
    """The database cannot be reached, or its connection URI cannot be used."""


class CaptureLost(ChangefeedError):
    """CF011: a ``capture: trigger`` source lost its triggers (re-created without setup)."""

    sqlstate = "CF011"


class WriteOutsideBlock(ChangefeedError):
    """CF012: a blocking writer inserted a row outside its shard or its allocated block."""

    sqlstate = "CF012"


class FellBehindRetention(ChangefeedError):
    """CF013: the reader's cursor lies below events that retention removed (protocol 8.1).

    Re-snapshot: copy the source table again and continue from the shard's current safe
    point; the events between the cursor and the retention horizon are gone.
    """

    sqlstate = "CF013"


class FeedNotFound(ChangefeedError):
    """The feed is not in the registry (or the registry does not exist)."""


class NeedsUpgrade(ChangefeedError):
    """The feed was set up by an older package that lacks the operation: run
    ``upgrade_feed`` (it re-creates the routines and keeps the data)."""


class WrongMode(ChangefeedError):
    """The operation needs the other mode (e.g. ``write`` on an outbox feed)."""


class BarrierTimeout(ChangefeedError):
    """``barrier_wait`` gave up before the barrier was released."""


_BY_SQLSTATE: dict[str, type[ChangefeedError]] = {
    cls.sqlstate: cls
    for cls in (
        WriteAbandoned,
        LockBurned,
        UlidRangeError,
        NoWriteInProgress,
        LockInTransaction,
        WriteInProgress,
        InvalidArgument,
        SetupConflict,
        CaptureLost,
        WriteOutsideBlock,
        FellBehindRetention,
    )
    if cls.sqlstate is not None
}


def translate(exc: BaseException) -> BaseException:
    """The :class:`ChangefeedError` for a psycopg error with a ``CF`` SQLSTATE, else ``exc``.

    >>> class Fake(Exception):
    ...     sqlstate = "CF002"
    >>> type(translate(Fake("burned"))).__name__
    'LockBurned'
    >>> isinstance(translate(ValueError("x")), ValueError)
    True
    """
    sqlstate: Any = getattr(exc, "sqlstate", None)
    cls = _BY_SQLSTATE.get(sqlstate) if isinstance(sqlstate, str) else None
    if cls is None:
        return exc
    diag: Any = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or str(exc).strip()
    hint = getattr(diag, "message_hint", None)
    return cls(f"{message} ({hint})" if hint else message, cause=exc)
