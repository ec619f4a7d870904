"""A recording stand-in for a pymssql connection, for the tests that pin T-SQL text.

SQL Server cannot run on this machine (no server, no Docker), so the statements the
client sends are pinned against this fake instead: a DB-API connection that records every
statement as pymssql's own parameter substitution (``pymssql._mssql.substitute_params``)
renders it, i.e. the text pymssql sends, and answers from a script of regular
expressions. The same code runs against a real server in ``tests/sqlserver_live``
(needs ``CHANGEFEED_SQLSERVER_DSN``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pymssql import _mssql

Answer = tuple[list[str], list[tuple[Any, ...]]]


class FakeServer:
    """Answers statements by regular expression; records each as pymssql renders it."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.connects: list[dict[str, Any]] = []
        self.rules: list[tuple[re.Pattern[str], Callable[[str], Answer]]] = []
        self.closed = 0

    def on(self, pattern: str, answer: Answer | Callable[[str], Answer] | Exception) -> None:
        def respond(sql: str) -> Answer:
            if isinstance(answer, Exception):
                raise answer
            return answer(sql) if callable(answer) else answer

        self.rules.insert(0, (re.compile(pattern, re.S), respond))

    def connect(self, **kwargs: Any) -> FakeConnection:
        self.connects.append(kwargs)
        return FakeConnection(self)


class FakeConnection:
    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def cursor(self) -> FakeCursor:
        return FakeCursor(self.server)

    def close(self) -> None:
        self.server.closed += 1


class FakeCursor:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.description: list[tuple[str, ...]] | None = None
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> None:
        rendered = sql if params is None else _mssql.substitute_params(sql, params).decode()
        self.server.statements.append(rendered)
        for pattern, respond in self.server.rules:
            if pattern.search(rendered):
                names, rows = respond(rendered)
                self.description = [(n,) for n in names] if names else None
                self._rows = rows
                return
        raise AssertionError(f"unexpected statement: {rendered}")

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    def close(self) -> None:
        pass
