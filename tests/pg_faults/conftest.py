"""Fixtures of the fault suite: feeds on the shared embedded server, connections.

Every scenario gets its own source table in its own schema (``pgf_<n>``), set up with
``dbt run-operation changefeed.setup_feed`` (the user's path), so scenarios never share
a feed and can run in any order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.faults.feedkit import FeedKit
from tests.support.faults.fixtures import Connections, MakeFeed

_counter = itertools.count()
DBT_PROJECT = Path(__file__).resolve().parent / "dbt"




@pytest.fixture
def connect(pg_uri: str) -> Iterator[Connections]:
    conns = Connections(pg_uri)
    yield conns
    conns.close()


@pytest.fixture(scope="session")
def admin(pg_uri: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_uri, autocommit=True)
    yield conn
    conn.close()




@pytest.fixture(scope="session")
def faults_dbt(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """dbt in-process against ``tests/pg_faults/dbt``: the package and no models."""
    from tests.support.dbt_harness import DbtHarness

    return DbtHarness(
        tmp_path_factory.mktemp("pg_faults_dbt"),
        postgres_uri=lambda: pg_uri,
        project_dir=DBT_PROJECT,
    )


@pytest.fixture
def make_feed(faults_dbt: Any, admin: psycopg.Connection[Any]) -> MakeFeed:
    """``make_feed(mode, stall_timeout_ms=600, ...)`` -> a new feed on a new table.

    ``columns`` is the source table's column list (default ``id bigint primary key``);
    ``key`` is passed to setup_feed (default: the primary key).
    """

    def make(
        mode: str,
        *,
        stall_timeout_ms: int = 600,
        lock_probe_ms: int = 20,
        schema: str | None = None,
        table: str = "orders",
        columns: str = '"id" bigint primary key',
        key: list[str] | None = None,
    ) -> FeedKit:
        schema = schema or f"pgf_{next(_counter)}_{mode}"
        admin.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("create schema {}").format(sql.Identifier(schema)))
        admin.execute(
            sql.SQL("create table {}.{} (" + columns + ")").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
        )
        args: dict[str, Any] = {
            "relation": {"schema": schema, "table": table},
            "mode": mode,
            "stall_timeout_ms": stall_timeout_ms,
            "lock_probe_ms": lock_probe_ms,
        }
        if key is not None:
            args["key"] = key
        faults_dbt.run_operation("changefeed.setup_feed", args, target="postgres")
        return FeedKit.load(admin, f"{schema}.{table}")

    return make
