"""Deprecated: moved to :mod:`changefeed.local.embedded_postgres`, whose names this alias re-exports
until the next release removes it."""

import warnings

from changefeed.local.embedded_postgres import *  # noqa: F403
from changefeed.local.embedded_postgres import __all__ as __all__

warnings.warn(
    "changefeed.embedded_postgres is deprecated and goes in the next release: import "
    "changefeed.local.embedded_postgres instead",
    DeprecationWarning,
    stacklevel=2,
)
