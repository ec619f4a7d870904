"""The Python examples of docs/postgres.md run, in order, against the embedded server.

The page's tables are renamed from ``shop.*`` to ``cf_docs_shop.*`` so that this test
never meets another test's ``shop`` schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.support.pg_feeds import connect, create_table, setup_feed, teardown_feed

from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

DOC = Path(__file__).resolve().parents[1] / "docs" / "postgres.md"


def _python_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return [b.replace("shop.", "cf_docs_shop.") for b in blocks]


def test_the_python_examples_run(dbt: Any, pg_uri: str) -> None:
    blocks = _python_blocks()
    assert len(blocks) >= 4
    with connect(pg_uri) as admin:
        create_table(admin, "cf_docs_shop", "orders", "order_id bigint primary key, note text")
        create_table(
            admin,
            "cf_docs_shop",
            "items",
            "region int, sku text, price int, primary key (region, sku)",
        )
        admin.execute("insert into cf_docs_shop.items values (1, 'a', 5)")
    for table in ("orders", "items"):
        teardown_feed(dbt, "cf_docs_shop", table)
    setup_feed(dbt, "cf_docs_shop", "orders", "blocking")
    setup_feed(dbt, "cf_docs_shop", "items", "outbox")

    namespace: dict[str, Any] = {"uri": pg_uri}
    try:
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
        conn = namespace["conn"]
        orders = PostgresFeed("cf_docs_shop.orders")
        assert [e.key for e in orders.read_page(conn, 0).events] == [(42,), (43,)]
        assert namespace["moved"] == 1
        assert [e.key for e in namespace["page"].events] == [(42,), (43,)]
        items = PostgresFeed("cf_docs_shop.items")
        assert [e.key for e in items.read_page(conn, 0).events] == [(1, "a")]
    finally:
        if "conn" in namespace:
            namespace["conn"].close()
        for table in ("orders", "items"):
            teardown_feed(dbt, "cf_docs_shop", table)
