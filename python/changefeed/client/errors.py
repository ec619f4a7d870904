"""The feed routines' refusals as Python exceptions, and PostgreSQL's translation.

The classes live in :mod:`changefeed.errors` (one root for the whole package, each class
carrying its PostgreSQL SQLSTATE and its SQL Server error numbers); they are re-exported
here and from :mod:`changefeed.client`. :func:`translate` maps a psycopg error with a
``CF`` SQLSTATE to its class; SQL Server's is
:func:`changefeed.dialects.sqlserver.client.translate`.
"""

from __future__ import annotations

from typing import Any

from changefeed.errors import (
    BarrierTimeout,
    CannotConnect,
    CaptureLost,
    ChangefeedError,
    DriverMissing,
    FeedNotFound,
    FellBehindRetention,
    InvalidArgument,
    LockBurned,
    LockInTransaction,
    NeedsUpgrade,
    NoWriteInProgress,
    SetupConflict,
    UlidRangeError,
    WriteAbandoned,
    WriteInProgress,
    WriteOutsideBlock,
    WriteTransactionBroken,
    WrongMode,
    by_sqlstate,
)

__all__ = [
    "BarrierTimeout",
    "CannotConnect",
    "CaptureLost",
    "ChangefeedError",
    "DriverMissing",
    "FeedNotFound",
    "FellBehindRetention",
    "InvalidArgument",
    "LockBurned",
    "LockInTransaction",
    "NeedsUpgrade",
    "NoWriteInProgress",
    "SetupConflict",
    "UlidRangeError",
    "WriteAbandoned",
    "WriteInProgress",
    "WriteOutsideBlock",
    "WriteTransactionBroken",
    "WrongMode",
    "translate",
]

_BY_SQLSTATE = by_sqlstate()


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
