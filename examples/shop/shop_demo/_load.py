"""The shop's load: concurrent writers on several shards of both feeds.

Each writer thread has its own connection and runs transactions like an order service
would:

* ``new order`` (blocking feed ``shop.orders``): insert an order and its event;
* ``pay`` (both feeds in one transaction): mark an order paid, insert the charge, and
  record the charge's key in the ``shop.payments`` outbox;
* ``ship``: mark a paid order shipped;
* ``refund`` (outbox feed only): insert a negative payment for a paid order.

Some transactions are **long** (they sleep inside the transaction, holding the shard's
lock in blocking mode, or committing their outbox rows late in outbox mode) and some
are **rolled back** after writing everything. Every transaction also writes one row per
event into ``shop_audit.committed_events``, in the same transaction, so the audit table
holds exactly the committed events whatever happens to the process; rolled-back ones
are recorded in ``shop_audit.rolled_back_events`` after their rollback. The final check
compares Spark against these two tables.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

AUDIT_DDL = """
create schema if not exists shop_audit;
create table if not exists shop_audit.committed_events (
    feed        text           not null,
    shard_id    integer        not null,
    key         bigint         not null,
    amount      numeric(12, 2),
    run         integer        not null,
    recorded_at timestamptz    not null default clock_timestamp()
);
create table if not exists shop_audit.rolled_back_events (
    feed        text           not null,
    shard_id    integer        not null,
    key         bigint         not null,
    new_key     boolean        not null,
    run         integer        not null,
    recorded_at timestamptz    not null default clock_timestamp()
);
"""

#: Transaction kinds and their weights.
ACTIONS = {"new order": 45, "pay": 30, "ship": 12, "refund": 6}
ROLLBACK_SHARE = 0.06
LONG_SHARE = 0.05
#: Long transactions sleep this long (seconds) inside the transaction. Below the feed's
#: stall_timeout_ms (5 s), so a long blocking writer is waited for, not burned.
LONG_SECONDS = (0.5, 2.0)


class _Rollback(Exception):
    """Raised inside a transaction to roll it back on purpose."""


@dataclass
class LoadStats:
    """Counters shared by the writers (read them under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    transactions: int = 0
    rolled_back: int = 0
    rolled_back_events: int = 0
    long: int = 0
    retried: int = 0
    events: dict[str, int] = field(default_factory=lambda: {"shop.orders": 0, "shop.payments": 0})
    errors: list[str] = field(default_factory=list)
    #: feed -> key -> wall-clock times (time.time()) at which this run's transactions that
    #: wrote an event of the key returned from COMMIT, in commit order: what the demo's
    #: committed -> landed latency is measured from.
    commits: dict[str, dict[int, list[float]]] = field(
        default_factory=lambda: {"shop.orders": {}, "shop.payments": {}}
    )

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "transactions": self.transactions,
                "rolled_back": self.rolled_back,
                "rolled_back_events": self.rolled_back_events,
                "long": self.long,
                "retried": self.retried,
                "events": dict(self.events),
            }


class OrderPool:
    """Orders by status and shard, so that two writers never pick the same order."""

    def __init__(self, shards: int) -> None:
        self._lock = threading.Lock()
        self._by_status: dict[str, list[list[int]]] = {
            status: [[] for _ in range(shards)] for status in ("created", "paid", "shipped")
        }

    def add(self, status: str, shard: int, order_id: int) -> None:
        with self._lock:
            bucket = self._by_status[status][shard]
            bucket.append(order_id)
            if len(bucket) > 5000:
                del bucket[: len(bucket) - 5000]

    def take(self, status: str, shard: int, rng: random.Random) -> int | None:
        with self._lock:
            bucket = self._by_status[status][shard]
            if not bucket:
                return None
            return bucket.pop(rng.randrange(len(bucket)))


class LoadGenerator:
    """``writers`` threads, together about ``rate`` transactions per second."""

    def __init__(
        self,
        uri: str,
        *,
        run: int,
        shards: int = 4,
        writers: int = 6,
        rate: float = 40.0,
        seed: int | None = None,
    ) -> None:
        self.uri = uri
        self.run = run
        self.shards = shards
        self.writers = writers
        self.rate = rate
        self.seed = seed
        self.stats = LoadStats()
        self.pool = OrderPool(shards)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stopped_at = float("inf")
        """``time.monotonic()`` when :meth:`stop` was first called."""

    # -- lifecycle ---------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the audit tables and load open orders of earlier runs into the pool."""
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute(AUDIT_DDL)
            rows = conn.execute(
                "select order_id, shard_id, status from shop.orders "
                "where status in ('created', 'paid', 'shipped') and shard_id < %s "
                "order by order_id desc limit 4000",
                (self.shards,),
            ).fetchall()
        for order_id, shard, status in rows:
            self.pool.add(str(status), int(shard), int(order_id))

    def start(self) -> None:
        for index in range(self.writers):
            thread = threading.Thread(
                target=self._writer, args=(index,), name=f"shop-writer-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the writers; transactions in flight finish (commit or roll back) first."""
        if not self._stop.is_set():
            self.stopped_at = time.monotonic()
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def warm_up(self) -> None:
        """Commit one new order and a payment on shard 0, then forget their commit times.

        Run before the load, so that the landings' first batch write, the slowest of a
        Spark session, lands these two and not events whose latency is measured (as
        benchmarks/landing_latency.py lands a batch before it measures). They are real
        events: audited, landed and checked like the others.
        """
        import psycopg

        from changefeed.client import PostgresFeed

        rng = random.Random(self.seed)
        orders, payments = PostgresFeed("shop.orders"), PostgresFeed("shop.payments")
        with psycopg.connect(self.uri, autocommit=True, application_name="shop-warm-up") as conn:
            self._new_order(conn, orders, 0, rng, rollback=False, pause=0.0)
            order_id = self.pool.take("created", 0, rng)
            if order_id is not None:
                self._pay(conn, orders, payments, 0, order_id, rollback=False, pause=0.0)
        with self.stats.lock:
            self.stats.transactions += 1 if order_id is None else 2
            for commits in self.stats.commits.values():
                commits.clear()

    # -- one writer --------------------------------------------------------------------

    def _writer(self, index: int) -> None:
        import psycopg

        from changefeed.client import ChangefeedError, PostgresFeed

        rng = random.Random(None if self.seed is None else self.seed * 1000 + index)
        orders = PostgresFeed("shop.orders")
        payments = PostgresFeed("shop.payments")
        interval = self.writers / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic() + rng.random() * interval
        conn: Any = None
        while not self._stop.is_set():
            delay = next_at - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            next_at = max(next_at + interval, time.monotonic() - 1.0)
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.uri, autocommit=True, application_name=f"shop-{index}"
                    )
                self._one_transaction(conn, orders, payments, rng)
            except ChangefeedError as exc:
                with self.stats.lock:
                    if exc.retryable:
                        self.stats.retried += 1  # rolled back by the client; nothing committed
                    else:
                        self.stats.errors.append(f"{type(exc).__name__}: {exc}")
            except psycopg.Error as exc:
                with self.stats.lock:
                    self.stats.errors.append(f"{type(exc).__name__}: {str(exc).strip()}")
                if conn is not None and not conn.closed:
                    conn.close()
                conn = None
                self._stop.wait(0.5)
            except Exception as exc:  # a bug in the demo must show, not kill a writer silently
                with self.stats.lock:
                    self.stats.errors.append(f"{type(exc).__name__}: {exc}")
                self._stop.wait(0.5)
        if conn is not None:
            conn.close()

    def _one_transaction(self, conn: Any, orders: Any, payments: Any, rng: random.Random) -> None:
        shard = rng.randrange(self.shards)
        action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
        rollback = rng.random() < ROLLBACK_SHARE
        long = not rollback and rng.random() < LONG_SHARE
        pause = rng.uniform(*LONG_SECONDS) if long else 0.0
        try:
            if action == "pay" and (order_id := self.pool.take("created", shard, rng)):
                self._pay(conn, orders, payments, shard, order_id, rollback, pause)
            elif action == "ship" and (order_id := self.pool.take("paid", shard, rng)):
                self._ship(conn, orders, shard, order_id, rollback, pause)
            elif action == "refund" and (order_id := self.pool.take("shipped", shard, rng)):
                self._refund(conn, payments, shard, order_id, rollback, pause)
            else:
                self._new_order(conn, orders, shard, rng, rollback, pause)
        except _Rollback as undone:
            keys: list[tuple[str, int, bool]] = undone.args[0]
            conn.execute(
                "insert into shop_audit.rolled_back_events (feed, shard_id, key, new_key, run) "
                "select f, %s, k, n, %s from unnest(%s::text[], %s::bigint[], %s::boolean[]) "
                "as t(f, k, n)",
                (shard, self.run, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
            )
            with self.stats.lock:
                self.stats.transactions += 1
                self.stats.rolled_back += 1
                self.stats.rolled_back_events += len(keys)
            return
        with self.stats.lock:
            self.stats.transactions += 1
            self.stats.long += 1 if long else 0

    # -- the transactions --------------------------------------------------------------

    def _audit(self, conn: Any, feed: str, shard: int, key: int, amount: Any = None) -> None:
        conn.execute(
            "insert into shop_audit.committed_events (feed, shard_id, key, amount, run) "
            "values (%s, %s, %s, %s, %s)",
            (feed, shard, key, amount, self.run),
        )

    def _count(self, feed: str, key: int, committed_at: float) -> None:
        with self.stats.lock:
            self.stats.events[feed] += 1
            self.stats.commits[feed].setdefault(key, []).append(committed_at)

    def _new_order(
        self, conn: Any, orders: Any, shard: int, rng: random.Random, rollback: bool, pause: float
    ) -> None:
        amount = Decimal(rng.randrange(500, 50000)) / 100
        order_id = 0
        with orders.write(conn, shard) as w:
            order_id = int(
                conn.execute(
                    "insert into shop.orders (customer_id, shard_id, status, amount) "
                    "values (%s, %s, 'created', %s) returning order_id",
                    (rng.randrange(1, 10_000), shard, amount),
                ).fetchone()[0]
            )
            w.insert_events([(order_id,)])
            self._audit(conn, "shop.orders", shard, order_id)
            time.sleep(pause)
            if rollback:
                raise _Rollback([("shop.orders", order_id, True)])
        self._count("shop.orders", order_id, time.time())
        self.pool.add("created", shard, order_id)

    def _pay(
        self,
        conn: Any,
        orders: Any,
        payments: Any,
        shard: int,
        order_id: int,
        rollback: bool,
        pause: float,
    ) -> None:
        try:
            with orders.write(conn, shard) as w:
                amount = conn.execute(
                    "update shop.orders set status = 'paid', updated_at = now() "
                    "where order_id = %s returning amount",
                    (order_id,),
                ).fetchone()[0]
                w.insert_events([(order_id,)])
                payment_id = int(
                    conn.execute(
                        "insert into shop.payments (order_id, shard_id, kind, amount) "
                        "values (%s, %s, 'charge', %s) returning payment_id",
                        (order_id, shard, amount),
                    ).fetchone()[0]
                )
                payments.insert_outbox(conn, shard, [(payment_id,)])
                self._audit(conn, "shop.orders", shard, order_id)
                self._audit(conn, "shop.payments", shard, payment_id, amount)
                time.sleep(pause)
                if rollback:
                    raise _Rollback(
                        [("shop.orders", order_id, False), ("shop.payments", payment_id, True)]
                    )
        except BaseException:
            self.pool.add("created", shard, order_id)
            raise
        committed_at = time.time()
        self._count("shop.orders", order_id, committed_at)
        self._count("shop.payments", payment_id, committed_at)
        self.pool.add("paid", shard, order_id)

    def _ship(
        self, conn: Any, orders: Any, shard: int, order_id: int, rollback: bool, pause: float
    ) -> None:
        try:
            with orders.write(conn, shard) as w:
                conn.execute(
                    "update shop.orders set status = 'shipped', updated_at = now() "
                    "where order_id = %s",
                    (order_id,),
                )
                w.insert_events([(order_id,)])
                self._audit(conn, "shop.orders", shard, order_id)
                time.sleep(pause)
                if rollback:
                    raise _Rollback([("shop.orders", order_id, False)])
        except BaseException:
            self.pool.add("paid", shard, order_id)
            raise
        self._count("shop.orders", order_id, time.time())
        self.pool.add("shipped", shard, order_id)

    def _refund(
        self, conn: Any, payments: Any, shard: int, order_id: int, rollback: bool, pause: float
    ) -> None:
        # An outbox-only transaction: no lock, no feed procedure, just an outbox insert.
        # Refunds are for shipped orders, which stay shipped.
        try:
            with conn.transaction():
                row = conn.execute(
                    "insert into shop.payments (order_id, shard_id, kind, amount) "
                    "select order_id, shard_id, 'refund', -round(amount / 10, 2) "
                    "from shop.orders where order_id = %s returning payment_id, amount",
                    (order_id,),
                ).fetchone()
                payment_id, amount = int(row[0]), row[1]
                payments.insert_outbox(conn, shard, [(payment_id,)])
                self._audit(conn, "shop.payments", shard, payment_id, amount)
                time.sleep(pause)
                if rollback:
                    raise _Rollback([("shop.payments", payment_id, True)])
        finally:
            self.pool.add("shipped", shard, order_id)
        self._count("shop.payments", payment_id, time.time())
