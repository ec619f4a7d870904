"""Deprecated: moved to :mod:`changefeed.dialects.sqlserver.client`, with the rest of its
database's statements; this alias re-exports its names until the next release removes it."""

import warnings

from changefeed.dialects.sqlserver.client import *  # noqa: F403
from changefeed.dialects.sqlserver.client import __all__ as __all__

warnings.warn(
    "changefeed.client.sqlserver is deprecated and goes in the next release: import "
    "changefeed.dialects.sqlserver.client instead",
    DeprecationWarning,
    stacklevel=2,
)
