"""Deprecated alias of :mod:`changefeed.dialects.sqlserver.client`, where SQL Server's client
now lives with the rest of its statements. Import from there (or the classes from
:mod:`changefeed.client`); this alias is removed in 0.3.0."""

from __future__ import annotations

import warnings
from typing import Any

from changefeed.dialects.sqlserver import client as _moved

warnings.warn(
    "changefeed.client.sqlserver is deprecated and will be removed in 0.3.0: import "
    "changefeed.dialects.sqlserver.client instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
