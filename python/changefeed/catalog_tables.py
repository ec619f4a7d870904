"""Deprecated: moved to :mod:`changefeed.local.catalog_tables`, whose names this alias re-exports
until the next release removes it."""

import warnings

from changefeed.local.catalog_tables import *  # noqa: F403
from changefeed.local.catalog_tables import __all__ as __all__

warnings.warn(
    "changefeed.catalog_tables is deprecated and goes in the next release: import "
    "changefeed.local.catalog_tables instead",
    DeprecationWarning,
    stacklevel=2,
)
