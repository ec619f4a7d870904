"""Deprecated: moved to :mod:`changefeed.local.catalog`, whose names this alias re-exports
until the next release removes it."""

import warnings

from changefeed.local.catalog import *  # noqa: F403
from changefeed.local.catalog import __all__ as __all__

warnings.warn(
    "changefeed.catalog is deprecated and goes in the next release: import "
    "changefeed.local.catalog instead",
    DeprecationWarning,
    stacklevel=2,
)
