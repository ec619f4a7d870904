"""Deprecated: moved to :mod:`changefeed.local.spark`, whose names this alias re-exports
until the next release removes it."""

import warnings

from changefeed.local.spark import *  # noqa: F403
from changefeed.local.spark import __all__ as __all__

warnings.warn(
    "changefeed.local_spark is deprecated and goes in the next release: import "
    "changefeed.local.spark instead",
    DeprecationWarning,
    stacklevel=2,
)
