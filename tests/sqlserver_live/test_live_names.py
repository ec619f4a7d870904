"""Hostile and 128-character names on a real SQL Server: quotes, brackets, `;`, spaces,
comment markers, a reserved word, non-ASCII (one character outside the BMP) and a line
break in names of schemas, tables and key columns, and names shortened by the long-name
rule. Events flow through every such feed exactly as through a plain one."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
from tests.support.sqlserver_live import LiveFeed, lit, scalar

HOSTILE_ROWS = [
    [1, "it's; -- x", dt.datetime(2024, 1, 2, 3, 4, 5), decimal.Decimal("1.2500")],
    [2, "[b]]r]", dt.datetime(2024, 1, 2, 3, 4, 6), decimal.Decimal("-3.0000")],
]


@pytest.mark.parametrize("case", ["blocking_hostile", "outbox_hostile"])
def test_hostile_names(fresh: Any, conn: Any, case: str) -> None:
    feed: LiveFeed = fresh(case)
    assert scalar(conn, f"select object_id({lit(feed.obj('feed'))});") is not None
    if feed.spec["mode"] == "blocking":
        feed.write(conn, 0, HOSTILE_ROWS)
    else:
        feed.outbox_insert(conn, 0, HOSTILE_ROWS)
    rows = feed.read_all(conn, 0)
    assert [r.key[:2] for r in rows] == [(1, "it's; -- x"), (2, "[b]]r]")]
    assert [decimal.Decimal(r.key[3]) for r in rows] == [
        decimal.Decimal("1.25"),
        decimal.Decimal("-3"),
    ]
    sp = feed.client.safe_point(conn, 0)
    assert (
        sp.safe_point
        == sp.head
        == rows[-1].ulid[:8]
        + (
            (int.from_bytes(rows[-1].ulid[8:], "big", signed=True) >> 36 << 36) + 2**36 - 1
        ).to_bytes(8, "big", signed=True)
    )
    assert feed.client.barrier_check(conn, feed.client.barrier_acquire(conn, 0)) is True


@pytest.mark.parametrize(
    ("case", "row"),
    [
        ("blocking_long_names", [uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff"), "s", 1]),
        ("outbox_long_names", [7]),
    ],
)
def test_long_names(fresh: Any, conn: Any, case: str, row: list[Any]) -> None:
    feed: LiveFeed = fresh(case)
    assert all(len(name) <= 128 for name in feed.names.values())
    if feed.spec["mode"] == "blocking":
        feed.write(conn, 0, [row])
    else:
        feed.outbox_insert(conn, 0, [row])
    assert [list(r.key) for r in feed.read_all(conn, 0)] == [row]
