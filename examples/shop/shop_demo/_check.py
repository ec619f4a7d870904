"""The exactly-once check: every committed event reached Spark once, no rolled-back one did.

The truth is ``shop_audit.committed_events``: each writer transaction inserts one row
per event it writes, in the same transaction, so a row exists exactly when the event's
transaction committed. After the load has stopped, a barrier has been passed on every
shard and the feeds have been landed and consumed one last time, the check requires:

1. landed: for every (feed, shard, key), as many events in the landed Spark table as
   committed ones (a skipped event shows as a shortfall, a duplicate or a leaked
   rollback as an excess), and no (shard, ulid) twice;
2. rolled back: no key that only a rolled-back transaction wrote is in Spark;
3. consumed: the dbt models consumed every landed event once: ``order_updates`` counts
   per order, ``payments_hourly`` per shard, and revenue per hour equals the sum of the
   committed payments in PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from shop_demo._layout import FEEDS


@dataclass
class FeedCheck:
    feed: str
    committed: int = 0
    landed: int = 0
    consumed: int = 0
    missing: int = 0
    extra: int = 0
    duplicate_ulids: int = 0
    rolled_back: int = 0
    rolled_back_in_spark: int = 0
    consumer_mismatches: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass
class CheckResult:
    feeds: dict[str, FeedCheck]
    revenue_hours: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and all(f.passed for f in self.feeds.values())

    def all_problems(self) -> list[str]:
        found = [p for f in self.feeds.values() for p in f.problems]
        return found + self.problems


def _counter(rows: Any) -> Counter[tuple[int, int]]:
    return Counter({(int(r[0]), int(r[1])): int(r[2]) for r in rows})


def _compare(
    check: FeedCheck, truth: Counter[tuple[int, int]], seen: Counter[tuple[int, int]], what: str
) -> tuple[int, int]:
    missing = truth - seen
    extra = seen - truth
    if missing:
        sample = ", ".join(f"shard {s} key {k} (x{n})" for (s, k), n in list(missing.items())[:5])
        check.problems.append(
            f"{check.feed}: {sum(missing.values())} committed events are not {what}: {sample}"
        )
    if extra:
        sample = ", ".join(f"shard {s} key {k} (x{n})" for (s, k), n in list(extra.items())[:5])
        check.problems.append(
            f"{check.feed}: {sum(extra.values())} events {what} more often than committed "
            f"(duplicates or rolled back): {sample}"
        )
    return sum(missing.values()), sum(extra.values())


def run_check(spark: Any, pg: Any) -> CheckResult:
    """Compare PostgreSQL's audit tables with the landed feeds and the consumer models."""
    result = CheckResult(feeds={})
    landed_by_feed: dict[str, Counter[tuple[int, int]]] = {}
    for feed, (_mode, table, key) in FEEDS.items():
        check = FeedCheck(feed)
        result.feeds[feed] = check
        truth = _counter(
            pg.execute(
                "select shard_id, key, count(*) from shop_audit.committed_events "
                "where feed = %s group by 1, 2",
                (feed,),
            ).fetchall()
        )
        check.committed = sum(truth.values())
        spark.sql(f"refresh table {table}")
        landed = _counter(
            spark.sql(f"select shard_id, {key}, count(*) from {table} group by 1, 2").collect()
        )
        check.landed = sum(landed.values())
        landed_by_feed[feed] = landed
        check.missing, check.extra = _compare(check, truth, landed, "in Spark")
        row = spark.sql(f"select count(*) - count(distinct shard_id, ulid) from {table}").collect()[
            0
        ]
        check.duplicate_ulids = int(row[0])
        if check.duplicate_ulids:
            check.problems.append(f"{feed}: {check.duplicate_ulids} ULIDs landed twice")
        rolled = {
            (int(r[0]), int(r[1]))
            for r in pg.execute(
                "select shard_id, key from shop_audit.rolled_back_events "
                "where feed = %s and new_key",
                (feed,),
            ).fetchall()
        }
        check.rolled_back = int(
            pg.execute(
                "select count(*) from shop_audit.rolled_back_events where feed = %s", (feed,)
            ).fetchone()[0]
        )
        leaked = sorted(rolled & set(landed))
        check.rolled_back_in_spark = len(leaked)
        if leaked:
            check.problems.append(
                f"{feed}: {len(leaked)} keys of rolled-back transactions are in Spark, e.g. "
                + ", ".join(f"shard {s} key {k}" for s, k in leaked[:5])
            )

    _check_orders_consumer(spark, result.feeds["shop.orders"], landed_by_feed["shop.orders"])
    _check_payments_consumer(spark, pg, result, landed_by_feed["shop.payments"])
    return result


def _check_orders_consumer(spark: Any, check: FeedCheck, landed: Counter[tuple[int, int]]) -> None:
    spark.sql("refresh table shop_analytics.order_updates")
    consumed = _counter(
        spark.sql(
            "select shard_id, order_id, sum(events) from shop_analytics.order_updates group by 1, 2"
        ).collect()
    )
    check.consumed = sum(consumed.values())
    missing, extra = _compare(check, landed, consumed, "consumed by order_updates")
    check.consumer_mismatches = missing + extra


def _check_payments_consumer(
    spark: Any, pg: Any, result: CheckResult, landed_keys: Counter[tuple[int, int]]
) -> None:
    check = result.feeds["shop.payments"]
    landed: Counter[int] = Counter()
    for (shard, _key), count in landed_keys.items():
        landed[shard] += count
    spark.sql("refresh table shop_analytics.payments_hourly")
    consumed = Counter(
        {
            int(r[0]): int(r[1])
            for r in spark.sql(
                "select shard_id, sum(payments) from shop_analytics.payments_hourly group by 1"
            ).collect()
        }
    )
    check.consumed = sum(consumed.values())
    if landed != consumed:
        check.consumer_mismatches = sum(((landed - consumed) + (consumed - landed)).values())
        check.problems.append(
            f"shop.payments: payments_hourly consumed {dict(consumed)} events per shard, "
            f"the landed feed has {dict(landed)}"
        )
    truth = {
        str(r[0]): (int(r[1]), Decimal(r[2]))
        for r in pg.execute(
            "select to_char(date_trunc('hour', paid_at at time zone 'UTC'), "
            "'YYYY-MM-DD HH24:MI'), count(*), sum(amount) from shop.payments group by 1"
        ).fetchall()
    }
    spark_rows = {
        str(r[0]): (int(r[1]), Decimal(r[2]))
        for r in spark.sql(
            "select date_format(hour, 'yyyy-MM-dd HH:mm'), payments, revenue "
            "from shop_analytics.revenue_per_hour"
        ).collect()
    }
    result.revenue_hours = len(truth)
    if truth != spark_rows:
        differing = sorted(
            h for h in set(truth) | set(spark_rows) if truth.get(h) != spark_rows.get(h)
        )
        result.problems.append(
            "revenue_per_hour differs from PostgreSQL's committed payments in hours "
            + ", ".join(
                f"{h} (spark {spark_rows.get(h)}, postgres {truth.get(h)})" for h in differing[:3]
            )
        )
