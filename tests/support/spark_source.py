"""Shared helpers of the Spark source, stream and landing tests (real PostgreSQL).

Feeds are set up with the package's own dbt macro (``changefeed.setup_feed``) and
written the way an application does: blocking mode through ``lock`` / ``ulid`` /
``update_state`` in one transaction, outbox mode by inserting into the outbox.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

ZERO = bytes(16)


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def obj(feed: str, kind: str) -> str:
    return f"changefeed.{q(f'{kind}:{feed}')}"


def create_feed(dbt: Any, uri: str, mode: str, columns: str, *, key: Sequence[str] | None = None,
                schema: str = "srcs") -> str:  # fmt: skip
    """Create a fresh source table ``schema.t_<random>`` and set up its feed; return the feed id."""
    table = f"t_{mode}_{uuid.uuid4().hex[:8]}"
    feed = f"{schema}.{table}"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"create schema if not exists {q(schema)}")
        conn.execute(f"create table {q(schema)}.{q(table)} ({columns})")
    args: dict[str, Any] = {"relation": feed, "mode": mode}
    if key is not None:
        args["key"] = list(key)
    dbt.run_operation("changefeed.setup_feed", args, target="postgres")
    return feed


def write_blocking(uri: str, feed: str, shard: int, rows: Iterable[dict[str, Any]],
                   keys: Sequence[str]) -> None:  # fmt: skip
    """One source transaction (blocking mode): upsert ``rows`` and publish their keys."""
    rows = list(rows)
    schema, table = feed.split(".")
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"call {obj(feed, 'lock')}(%s, null)", (shard,))
        try:
            with conn.transaction():
                _upsert(conn, schema, table, rows, keys)
                key_list = ", ".join(q(k) for k in keys)
                placeholders = ", ".join(["%s"] * len(keys))
                with conn.cursor() as cur:
                    cur.executemany(
                        f"insert into {obj(feed, 'feed')} (shard_id, ulid, {key_list}) values "
                        f"(%s, {obj(feed, 'ulid')}(pg_catalog.nextval("
                        f"'{obj(feed, 'sequence')}'::regclass)), {placeholders})",
                        [(shard, *(r[k] for k in keys)) for r in rows],
                    )
                conn.execute(f"select {obj(feed, 'update_state')}()")
        except BaseException:
            conn.execute(f"select {obj(feed, 'release')}()")
            raise


def write_outbox(uri: str, feed: str, shard: int, rows: Iterable[dict[str, Any]],
                 keys: Sequence[str]) -> None:  # fmt: skip
    """One source transaction (outbox mode): upsert ``rows`` and queue their keys."""
    rows = list(rows)
    schema, table = feed.split(".")
    with psycopg.connect(uri) as conn:
        _upsert(conn, schema, table, rows, keys)
        key_list = ", ".join(q(k) for k in keys)
        placeholders = ", ".join(["%s"] * len(keys))
        with conn.cursor() as cur:
            cur.executemany(
                f"insert into {obj(feed, 'outbox')} (shard_id, {key_list}) "
                f"values (%s, {placeholders})",
                [(shard, *(r[k] for k in keys)) for r in rows],
            )
        conn.commit()


def write_many_blocking(uri: str, feed: str, shard: int, start: int, count: int,
                        per_tx: int) -> None:  # fmt: skip
    """``count`` events ``id = start ..`` on a feed keyed by ``id``, ``per_tx`` per transaction,
    with a generated insert (fast enough for tens of thousands of events)."""
    schema, table = feed.split(".")
    with psycopg.connect(uri, autocommit=True) as conn:
        for first in range(start, start + count, per_tx):
            last = min(first + per_tx, start + count) - 1
            conn.execute(f"call {obj(feed, 'lock')}(%s, null)", (shard,))
            with conn.transaction():
                conn.execute(
                    f"insert into {q(schema)}.{q(table)} (id, v) select g, 'v' || g "
                    f"from generate_series(%s::bigint, %s::bigint) as g "
                    f"on conflict (id) do update set v = excluded.v",
                    (first, last),
                )
                conn.execute(
                    f"insert into {obj(feed, 'feed')} (shard_id, ulid, id) select %s, "
                    f"{obj(feed, 'ulid')}(pg_catalog.nextval("
                    f"'{obj(feed, 'sequence')}'::regclass)), g "
                    f"from generate_series(%s::bigint, %s::bigint) as g",
                    (shard, first, last),
                )
                conn.execute(f"select {obj(feed, 'update_state')}()")


def _upsert(conn: Any, schema: str, table: str, rows: list[dict[str, Any]],
            keys: Sequence[str]) -> None:  # fmt: skip
    if not rows or len(rows[0]) == len(keys):
        return
    columns = list(rows[0])
    col_list = ", ".join(q(c) for c in columns)
    updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in columns if c not in keys)
    with conn.cursor() as cur:
        cur.executemany(
            f"insert into {q(schema)}.{q(table)} ({col_list}) values "
            f"({', '.join(['%s'] * len(columns))}) on conflict ({', '.join(q(k) for k in keys)}) "
            f"do update set {updates}",
            [tuple(r[c] for c in columns) for r in rows],
        )


def feed_rows(uri: str, feed: str) -> list[tuple[Any, ...]]:
    """Every committed event, straight from the feed table: (shard_id, ulid, *keys)."""
    with psycopg.connect(uri) as conn:
        rows = conn.execute(f"select * from {obj(feed, 'feed')} order by shard_id, ulid").fetchall()
    return [(int(r[0]), bytes(r[1]), *r[2:]) for r in rows]


def safe_point(uri: str, feed: str, shard: int) -> bytes:
    with psycopg.connect(uri) as conn:
        sql = f"select safe_point from {obj(feed, 'safe_point')}(%s)"
        row = conn.execute(sql, (shard,)).fetchone()
    return bytes(row[0]) if row else ZERO


def options(uri: str, feed: str, **extra: Any) -> dict[str, str]:
    return {"connection": uri, "feed": feed, **{k: str(v) for k, v in extra.items()}}


def client_rows(
    uri: str, feed: str, shards: Iterable[int], page_size: int = 1000
) -> list[tuple[Any, ...]]:
    """Every event up to the safe point, read page by page with the PostgreSQL client."""
    from changefeed.client import ZERO_ULID, PostgresFeed

    client = PostgresFeed(feed)
    out: list[tuple[Any, ...]] = []
    with psycopg.connect(uri, autocommit=True) as conn:
        for shard in shards:
            cursor = ZERO_ULID
            while True:
                page = client.read_page(conn, shard, cursor, page_size)
                if not page.events:
                    break
                out += [(e.shard_id, e.ulid, *e.key) for e in page.events]
                cursor = page.cursor
    return sorted(out)


def rows_of(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    """A DataFrame's rows as sorted tuples, binary columns as bytes."""
    names = list(columns) or frame.columns
    rows = [tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in r)
            for r in frame.select(*names).collect()]  # fmt: skip
    try:
        return sorted(rows)
    except TypeError:  # e.g. None among the values
        return sorted(rows, key=repr)
