"""The types behind the fault suite's fixtures (tests/pg_faults/conftest.py), for the
scenarios' annotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from tests.support.faults.feedkit import FeedKit


class Connections:
    """Autocommit connections that are closed when the test ends."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.opened: list[psycopg.Connection[Any]] = []

    def __call__(self, **kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        conn = psycopg.connect(self.uri, **kwargs)
        self.opened.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.opened:
            conn.close()


MakeFeed = Callable[..., FeedKit]
