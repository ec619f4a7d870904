"""Deprecated: moved to :mod:`changefeed.dialects.postgres.client`, with the rest of its
database's statements; this alias re-exports its names until the next release removes it."""

import warnings

from changefeed.dialects.postgres.client import *  # noqa: F403
from changefeed.dialects.postgres.client import __all__ as __all__

warnings.warn(
    "changefeed.client.postgres is deprecated and goes in the next release: import "
    "changefeed.dialects.postgres.client instead",
    DeprecationWarning,
    stacklevel=2,
)
