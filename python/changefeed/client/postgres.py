"""Deprecated alias of :mod:`changefeed.dialects.postgres.client`, where PostgreSQL's client
now lives with the rest of its statements. Import from there (or the classes from
:mod:`changefeed.client`); this alias is removed in 0.3.0."""

from __future__ import annotations

import warnings
from typing import Any

from changefeed.dialects.postgres import client as _moved

warnings.warn(
    "changefeed.client.postgres is deprecated and will be removed in 0.3.0: import "
    "changefeed.dialects.postgres.client instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
