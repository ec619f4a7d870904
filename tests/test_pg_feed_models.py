"""Feeds on dbt models (PostgreSQL), per materialization: an incremental model's feed records
what each run writes, starting with an event for every row it already has; table and view
models, incremental models whose feed could not see dbt's writes, and --full-refresh are
refused, and the refused run changes nothing (docs/macros.md, feed_post_hook).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from tests.support.dbt_harness import DbtError
from tests.support.pg_feeds import connect, create_table, registry_row, teardown_feed

from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

SCHEMA = "cf_dbtkit"  # the integration project's schema on the postgres target


def run_orders(dbt: Any, *extra: str, **variables: Any) -> None:
    """dbt run of the model; the documented config (meta) must not make dbt warn."""
    args = ["run", "--select", "cf_pg_orders", *extra]
    if variables:
        args += ["--vars", json.dumps({f"cf_orders_{k}": v for k, v in variables.items()})]
    warnings: list[str] = []
    dbt.invoke(args, "postgres", on_warning=warnings.append)
    assert warnings == []


def new_events(pg_uri: str, feed: PostgresFeed, cursor: bytes) -> tuple[list[int], bytes]:
    """Every event after cursor on shard 0 (the model's shard expression is the default 0)."""
    keys: list[int] = []
    with connect(pg_uri) as conn:
        while True:
            page = feed.read_page(conn, 0, cursor, page_size=1000)
            keys += [int(e.key[0]) for e in page.events]
            if not page.events:
                return keys, cursor
            cursor = page.events[-1].ulid


def table_rows(admin: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return admin.execute(f'select * from "{SCHEMA}"."{table}" order by 1').fetchall()


def test_an_incremental_model_feed_records_every_run_from_its_first_rows(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")
    admin.execute(f'drop table if exists "{SCHEMA}"."cf_pg_orders"')
    feed = PostgresFeed(f"{SCHEMA}.cf_pg_orders")
    cursor = bytes(16)

    run_orders(dbt)  # creates the table (rows 1-3), then its feed, then an event per row
    row = registry_row(admin, f"{SCHEMA}.cf_pg_orders")
    assert row is not None and row["mode"] == "outbox" and row["options"]["capture"] == "trigger"
    keys, cursor = new_events(pg_uri, feed, cursor)
    assert sorted(keys) == [1, 2, 3]

    run_orders(dbt, **{"from": 3, "upto": 5, "version": 2})  # merge: 3 updated, 4 and 5 new
    keys, cursor = new_events(pg_uri, feed, cursor)
    assert sorted(keys) == [3, 4, 5]
    assert [r[1] for r in table_rows(admin, "cf_pg_orders")] == [
        "order 1 v1", "order 2 v1", "order 3 v2", "order 4 v2", "order 5 v2"
    ]  # fmt: skip

    run_orders(dbt, **{"from": 1, "upto": 2, "version": 3, "strategy": "delete+insert"})
    keys, cursor = new_events(pg_uri, feed, cursor)
    assert sorted(set(keys)) == [1, 2]  # a delete and an insert of each key

    run_orders(dbt, **{"from": 6, "upto": 6, "strategy": "append"})
    keys, cursor = new_events(pg_uri, feed, cursor)
    assert keys == [6]

    run_orders(dbt, **{"from": 6, "upto": 6, "strategy": "merge"})  # the same row again
    assert new_events(pg_uri, feed, cursor)[0] == [6]  # an update is an event, even unchanged
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")


def test_full_refresh_of_a_model_with_a_feed_is_refused_and_changes_nothing(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")
    admin.execute(f'drop table if exists "{SCHEMA}"."cf_pg_orders"')
    run_orders(dbt)
    before = table_rows(admin, "cf_pg_orders")
    feed = PostgresFeed(f"{SCHEMA}.cf_pg_orders")
    keys, cursor = new_events(pg_uri, feed, bytes(16))
    assert sorted(keys) == [1, 2, 3]
    # Refused by the feed's event trigger as dbt renames the rebuilt table into place (its
    # rows have no events), before the post-hook's own refusal of --full-refresh.
    refused = r"(?s)rows that no event records.*--full-refresh.*full_refresh: false"
    with pytest.raises(DbtError, match=refused):
        run_orders(dbt, "--full-refresh", **{"upto": 1, "version": 9})
    assert table_rows(admin, "cf_pg_orders") == before
    assert new_events(pg_uri, feed, cursor)[0] == []
    # the capture triggers survived the refused rebuild: the next run is recorded
    run_orders(dbt, **{"from": 4, "upto": 4})
    assert new_events(pg_uri, feed, cursor)[0] == [4]
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")


def test_a_model_table_rebuilt_behind_the_feeds_back_fails_and_names_the_fix(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")
    admin.execute(f'drop table if exists "{SCHEMA}"."cf_pg_orders"')
    run_orders(dbt)
    admin.execute(f'drop table "{SCHEMA}"."cf_pg_orders"')  # someone drops it by hand
    # Refused by the feed's event trigger: the model's new table arrives with rows.
    with pytest.raises(DbtError, match=r"(?s)rows that no event records.*teardown_feed"):
        run_orders(dbt)
    assert admin.execute(f"select to_regclass('{SCHEMA}.cf_pg_orders')").fetchone() == (None,)
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")
    run_orders(dbt)  # the fix the error names: a new feed, which starts from every row
    assert registry_row(admin, f"{SCHEMA}.cf_pg_orders") is not None
    teardown_feed(dbt, SCHEMA, "cf_pg_orders")


def test_a_table_model_with_a_feed_fails_names_the_alternatives_and_keeps_the_rows(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    # An application's table that a table model with a feed config would rebuild.
    create_table(admin, SCHEMA, "cf_pg_table_feed", "id bigint primary key, note text")
    admin.execute(
        f'insert into "{SCHEMA}"."cf_pg_table_feed"'
        " select g, 'app row' from generate_series(1, 35) as g"
    )
    with pytest.raises(DbtError) as failure:
        dbt.invoke(["run", "--select", "cf_pg_table_feed"], "postgres")
    message = str(failure.value)
    assert "is materialized as 'table', which dbt rebuilds on every run" in message
    assert (
        "materialized='incremental' with meta: {changefeed: {mode: outbox, capture: trigger}}"
        in message
    )
    assert "dbt run-operation changefeed.setup_feed" in message
    rows = table_rows(admin, "cf_pg_table_feed")
    assert len(rows) == 35 and {r[1] for r in rows} == {"app row"}
    assert registry_row(admin, f"{SCHEMA}.cf_pg_table_feed") is None


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("cf_pg_view_feed", r"is materialized as 'view', which dbt rebuilds on every run"),
        ("cf_pg_incremental_blocking",
         r"is incremental with mode: blocking, capture: none; a feed on a dbt model"),
    ],
)  # fmt: skip
def test_models_whose_feed_could_not_record_dbts_writes_are_refused(
    dbt: Any, admin: psycopg.Connection[Any], model: str, message: str
) -> None:
    with pytest.raises(DbtError, match=message):
        dbt.invoke(["run", "--select", model], "postgres")
    assert admin.execute(f"select to_regclass('{SCHEMA}.{model}')").fetchone() == (None,)
    assert registry_row(admin, f"{SCHEMA}.{model}") is None


def test_a_model_without_a_feed_config_is_left_alone(
    dbt: Any, admin: psycopg.Connection[Any]
) -> None:
    dbt.invoke(["run", "--select", "cf_pg_no_feed"], "postgres")
    assert registry_row(admin, f"{SCHEMA}.cf_pg_no_feed") is None


def test_a_model_with_two_different_changefeed_configs_is_refused(dbt: Any) -> None:
    with pytest.raises(DbtError, match=r"changefeed config both under meta .* and they differ"):
        dbt.invoke(["run", "--select", "cf_pg_conflicting_config"], "postgres")
