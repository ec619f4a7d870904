"""Helpers shared by the tests/test_pg_*.py modules (PostgreSQL feeds on the embedded server).

Feeds are set up the user's way, ``dbt run-operation changefeed.setup_feed`` through the
``dbt`` fixture (tests/support/dbt_harness.py); these helpers only create source tables, call the
operations with the ``{schema, table}`` relation form (which takes any name), and read
the catalogue.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

BLOCK = 2**36
SCHEMA = "changefeed"
# A feed spec for rendering the macros without a database (MODE: the quoted mode).
RENDER_SPEC = (
    "{'feed_id': 'cf_render.t', 'database': 'postgres', 'source_schema': 'cf_render',"
    " 'source_table': 't', 'source_relation': '\"postgres\".\"cf_render\".\"t\"',"
    " 'schema': 'changefeed', 'mode': MODE, 'keys': [{'name': 'id', 'data_type': 'bigint',"
    " 'collation': none}], 'stall_timeout_ms': 5000, 'lock_probe_ms': 20, 'block_bits': 36,"
    " 'protocol_version': 3}"
)


def connect(uri: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(uri, autocommit=autocommit)


def race(
    connect: Callable[[], psycopg.Connection[Any]], statements: list[str]
) -> list[BaseException | None]:
    """Run each statement on its own connection, released together by a barrier once all
    connections are open; the error of each (None if it succeeded), in order."""
    gate = threading.Barrier(len(statements))
    results: list[BaseException | None] = [None] * len(statements)
    conns = [connect() for _ in statements]

    def run(i: int) -> None:
        gate.wait(30)
        try:
            conns[i].execute(statements[i])
        except psycopg.Error as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(statements))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for conn in conns:
        conn.close()
    return results


def create_table(conn: psycopg.Connection[Any], schema: str, table: str, columns: str) -> None:
    """(Re)create ``schema.table`` with the given column definitions (SQL)."""
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(schema)))
    conn.execute(
        sql.SQL("drop table if exists {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    )
    conn.execute(
        sql.SQL("create table {}.{} (" + columns + ")").format(
            sql.Identifier(schema), sql.Identifier(table)
        )
    )


def relation(schema: str, table: str) -> dict[str, str]:
    return {"schema": schema, "table": table}


def setup_feed(dbt: Any, schema: str, table: str, mode: str, **options: Any) -> list[str]:
    args: dict[str, Any] = {"relation": relation(schema, table), "mode": mode, **options}
    return list(dbt.run_operation("changefeed.setup_feed", args, target="postgres"))


def upgrade_feed(dbt: Any, schema: str, table: str, mode: str, **options: Any) -> list[str]:
    args: dict[str, Any] = {"relation": relation(schema, table), "mode": mode, **options}
    return list(dbt.run_operation("changefeed.upgrade_feed", args, target="postgres"))


def teardown_feed(dbt: Any, schema: str, table: str) -> list[str]:
    args = {"relation": relation(schema, table)}
    return list(dbt.run_operation("changefeed.teardown_feed", args, target="postgres"))


def registry_row(conn: psycopg.Connection[Any], feed_id: str) -> dict[str, Any] | None:
    cur = conn.execute(
        "select mode, key_signature, keys, options, names, protocol_version "
        "from changefeed.feeds where feed_id = %s",
        (feed_id,),
    )
    row = cur.fetchone()
    if row is None:
        return None
    keys = ["mode", "key_signature", "keys", "options", "names", "protocol_version"]
    return dict(zip(keys, row, strict=True))


def q(name: str) -> str:
    """``changefeed."<name>"``."""
    return f'{SCHEMA}."{name.replace(chr(34), chr(34) * 2)}"'


def object_oids(conn: psycopg.Connection[Any], names: Mapping[str, str]) -> dict[str, int]:
    """kind -> oid of every relation, routine, check constraint or role of ``names`` that exists."""
    found: dict[str, int] = {}
    for kind, name in names.items():
        if kind == "guc":
            continue
        if kind.endswith("_role"):
            row = conn.execute("select oid from pg_roles where rolname = %s", (name,)).fetchone()
        else:
            row = conn.execute(
                "select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where n.nspname = %s and c.relname = %s "
                "union all select p.oid from pg_proc p join pg_namespace n "
                "on n.oid = p.pronamespace "
                "where n.nspname = %s and p.proname = %s "
                "union all select k.oid from pg_constraint k join pg_namespace n "
                "on n.oid = k.connamespace where n.nspname = %s and k.conname = %s "
                "and k.contype = 'c'",
                (SCHEMA, name, SCHEMA, name, SCHEMA, name),
            ).fetchone()
        if row is not None:
            found[kind] = int(row[0])
    return found


def shortened(kind: str, feed_id: str, limit: int = 63) -> str:
    """The long-name rule of protocol section 9 in bytes, independently of the macros."""
    full = f"{kind}:{feed_id}"
    if len(full.encode()) <= limit:
        return full
    suffix = "~" + hashlib.md5(feed_id.encode()).hexdigest()[:8]
    budget = limit - len(f"{kind}:{suffix}".encode())
    prefix = ""
    for ch in feed_id:
        if len((prefix + ch).encode()) > budget:
            break
        prefix += ch
    return f"{kind}:{prefix}{suffix}"


@contextmanager
def as_role(conn: psycopg.Connection[Any], role: str) -> Iterator[psycopg.Connection[Any]]:
    """Run statements on ``conn`` as ``role`` (the tests connect as a superuser)."""
    conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
    try:
        yield conn
    finally:
        if not conn.closed:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            conn.execute("reset role")


def ulid_time_ms(ulid: bytes) -> int:
    return int.from_bytes(ulid[:6], "big")


def ulid_low(ulid: bytes) -> int:
    return int.from_bytes(ulid[8:], "big", signed=True)


def block_of(ulid: bytes) -> tuple[bytes, int]:
    """The block a ULID belongs to: (ulid_high, low >> 36)."""
    return ulid[:8], ulid_low(ulid) >> 36


def write_shop_events(uri: str, order_shards: Sequence[int] = (0, 1)) -> None:
    """In a database set up like examples/shop (tables and feeds): one order per entry of
    ``order_shards`` on that shard (blocking), and one unmoved payment on shard 0 (outbox)."""
    from changefeed.client import PostgresFeed

    orders, payments = PostgresFeed("shop.orders"), PostgresFeed("shop.payments")
    with connect(uri) as conn:
        for shard in order_shards:
            with orders.write(conn, shard) as w:
                row = conn.execute(
                    "insert into shop.orders (customer_id, shard_id, status, amount) "
                    "values (1, %s, 'created', 10) returning order_id",
                    (shard,),
                ).fetchone()
                assert row is not None
                w.insert_events([(row[0],)])
        with conn.transaction():
            row = conn.execute(
                "insert into shop.payments (order_id, shard_id, kind, amount) "
                "values (1, 0, 'charge', 10) returning payment_id"
            ).fetchone()
            assert row is not None
            payments.insert_outbox(conn, 0, [(row[0],)])
