"""A throwaway PostgreSQL server for the tests and the demo.

pgserver (PyPI) ships PostgreSQL 16 binaries inside its wheel, so nothing is installed
system-wide and no manual step is needed. The server listens on a Unix socket inside its
data directory and is removed when the process that started it exits.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from changefeed.errors import ChangefeedError

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresUnavailable",
    "import_pgserver",
    "start",
]


class EmbeddedPostgresUnavailable(ChangefeedError, RuntimeError):
    """pgserver is not installed or its server failed to start."""


def import_pgserver() -> Any:
    """Import pgserver (and return it) without the warning its import prints where
    ``XDG_RUNTIME_DIR`` is unset (most servers and containers): pgserver asks platformdirs
    for a runtime directory at import time, uses the ``/tmp`` fallback it gets, and the
    warning would precede every command that starts or checks an embedded server.
    Raises ``ImportError`` when pgserver is not installed; import its submodules after
    this call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver
    return pgserver


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A running server: ``uri`` is a libpq URI, ``socket_dir`` the Unix-socket directory."""

    uri: str
    socket_dir: str
    data_dir: str
    handle: Any


def start(data_dir: str | Path | None = None, *, persistent: bool = False) -> EmbeddedPostgres:
    """Start (or attach to) an embedded PostgreSQL server.

    With ``persistent=False`` the data directory is deleted when the last user exits;
    the demo passes ``persistent=True`` so that a second run continues where the first
    stopped.

    >>> pg = start()                       # doctest: +SKIP
    >>> pg.uri.startswith("postgresql://")  # doctest: +SKIP
    True
    """
    try:
        pgserver = import_pgserver()
    except ImportError as exc:  # pragma: no cover - exercised only without the dev extra
        raise EmbeddedPostgresUnavailable(
            "pgserver is not installed; run `make test` or `pip install pgserver`"
        ) from exc
    directory = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="cf-pg-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        handle = pgserver.get_server(str(directory), cleanup_mode=None if persistent else "delete")
    except Exception as exc:
        raise EmbeddedPostgresUnavailable(
            f"the embedded PostgreSQL server in {directory} failed to start: {exc}"
        ) from exc
    return EmbeddedPostgres(
        uri=handle.get_uri(), socket_dir=str(directory), data_dir=str(directory), handle=handle
    )
