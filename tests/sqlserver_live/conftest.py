"""The live SQL Server suite runs only when CHANGEFEED_SQLSERVER_DSN is set
(``mssql://user:password@host:1433/database``, see tests/support/sqlserver_live.py).
Without it every test here is collected and skipped with that reason, also when CI=true:
no SQL Server exists in this project's CI, so this is the one skip that is allowed there.

Each run renders the matrix of tests/support/sqlserver_matrix.py (exactly the SQL the render tests
check), creates a database of its own, sets up the feeds from those batches, and drops the
database at the end.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import sqlserver_live as livekit
from tests.support import sqlserver_matrix as matrix
from tests.support.sqlserver_live import DSN_VARIABLE, LiveFeed, Server, q, run

SKIP_REASON = (
    f"{DSN_VARIABLE} is not set, so the live SQL Server suite is skipped "
    "(set it to mssql://user:password@host:1433/database; no SQL Server runs in this CI)"
)
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    dsn = os.environ.get(DSN_VARIABLE, "")
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.sqlserver_live)
        if not dsn:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session", autouse=True)
def rendered_matrix(tmp_path_factory: pytest.TempPathFactory, pg_uri: str) -> None:
    """Renders the whole matrix once (dbt, postgres target: the generators are pure Jinja)
    for LiveFeed. Only the two golden cases are kept on disk, so the others are rendered."""
    harness = matrix.macros_harness(tmp_path_factory, pg_uri)
    livekit.RENDERED.update(matrix.render_cases(harness, list(matrix.CASES)))


@pytest.fixture(scope="session")
def mssql() -> Iterator[Server]:
    """A fresh database on the DSN's server, dropped after the session."""
    dsn = os.environ[DSN_VARIABLE]
    name = "changefeed_live_" + uuid.uuid4().hex[:12]
    admin = Server(dsn)
    with admin.connection() as conn:
        run(conn, f"create database {q(name)};")
        # The worst case for the lock protocol, as in mssql-changefeed's own tests.
        run(conn, f"alter database {q(name)} set allow_snapshot_isolation on;")
        run(
            conn,
            f"alter database {q(name)} set read_committed_snapshot on with rollback immediate;",
        )
    try:
        yield Server(dsn, name)
    finally:
        with admin.connection() as conn, contextlib.suppress(Exception):
            run(conn, f"alter database {q(name)} set single_user with rollback immediate;")
            run(conn, f"drop database {q(name)};")


@pytest.fixture
def conn(mssql: Server) -> Iterator[Any]:
    """An admin connection to the test database."""
    with mssql.connection() as c:
        yield c


@pytest.fixture
def fresh(mssql: Server) -> Any:
    """``fresh(case)``: the feed of a render-matrix case, its source table (re)created,
    the feed torn down and set up again from its rendered batch: every test starts empty."""

    def make(case: str) -> LiveFeed:
        feed = LiveFeed(case)
        with mssql.connection() as c:
            feed.create_source(c)
            feed.teardown(c)
            assert feed.setup(c) == "created"
        return feed

    return make
