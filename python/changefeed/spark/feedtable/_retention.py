"""Retention of a Spark feed (docs/protocol.md 11.7): remove whole old batches from the
bottom of the feed, never a shard's head and never past a known consumer's cursor.

The remaining batches are always a contiguous range ``[low, newest]``, so the horizon
(the highest batch retention removed) is ``low - 1``, derived from the partition list
like every other position of a Spark feed: there is nothing to store, and nothing that
could disagree with the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from changefeed.errors import FellBehindRetention
from changefeed.spark.feedtable._table import (
    BATCH_COLUMN,
    SHARD_COLUMN,
    ULID_COLUMN,
    FeedTable,
)

#: What a dbt consumer behind retention must do (docs/operations.md, Retention).
CONSUMER_FIX = (
    "rebuild it from the feed's oldest kept batch with dbt run --full-refresh --select "
    "<the consumer> (docs/operations.md, Retention)"
)


@dataclass(frozen=True)
class RetentionResult:
    """One run of :func:`retain` on one feed table."""

    table: str
    #: batches this run removed (0 when nothing was due or everything due was held)
    removed_batches: int
    #: the highest batch ever removed, the oldest kept minus one (0: none ever)
    horizon: int
    #: the lowest and highest batch of the feed after the run (None: the feed is empty)
    oldest_batch: int | None
    newest_batch: int | None
    #: batches the policy would have removed but a consumer's cursor keeps
    held_for_consumers: int
    slowest_consumer: str | None
    #: batches the policy would have removed but a shard's head keeps (F6), and the shard
    held_for_head: int
    head_shard: int | None


def feed_horizon(spark: Any, table: str) -> int:
    """The highest batch retention has removed from the feed: its oldest batch minus 1.

    A consumer that has consumed up to batch ``P`` may read on iff ``P >= horizon``. 0
    for a feed that never lost a batch, an empty one, or one that does not exist."""
    feed = FeedTable.for_name(spark, table)
    if not feed.exists():
        return 0
    found = feed.batch_range()
    return 0 if found is None else found[0] - 1


#: The cursor table of a state model's output (protocol 11.8), ``<state>`` + this.
STATE_CURSOR_SUFFIX = "__changefeed_cursor"


def consumed_batch(spark: Any, output: str) -> int | None:
    """The feed batch a consumer has consumed up to (protocol 11.6): the highest
    ``changefeed_feed_batch`` of its output's newest partition, or for a state model
    (``changefeed_current_state``, ``changefeed_history``, 11.8) the newest row of its
    cursor table ``<output>__changefeed_cursor``. None if the output does not exist yet
    (its first run reads the feed from its oldest kept batch)."""
    state = FeedTable.for_name(spark, output)
    if not state.exists():
        return None
    cursor = FeedTable(spark, state.name.with_suffix(STATE_CURSOR_SUFFIX))
    output = state.name.sql
    if cursor.exists():
        # written after the state, in the state's format, one row per committed run
        newest = spark.sql(
            f"select changefeed_feed_batch from {cursor.name.sql} "
            f"order by {BATCH_COLUMN} desc limit 1"
        ).first()
        return 0 if newest is None else int(newest[0])
    columns = [c.lower() for c in spark.table(output).columns]
    if "changefeed_feed_batch" not in columns:
        raise ValueError(
            f"{state.name.text} has no column changefeed_feed_batch, so its cursor is unknown and "
            "retention cannot keep what it has not read; it is not a feed consumer "
            "(docs/spark.md), or rebuild it once with dbt run --full-refresh"
        )
    fmt = state.format()
    found = state.batch_range(fmt)
    if found is None:
        return 0
    where = "" if fmt != "parquet" else f" where {BATCH_COLUMN} = {found[1]}"
    value = spark.sql(f"select max(changefeed_feed_batch) from {output}{where}").first()[0]
    return 0 if value is None else int(value)


def check_cursor(spark: Any, feed: str, consumed: int, consumer: str) -> None:
    """Raise :class:`FellBehindRetention` if a consumer that has consumed the feed up to
    batch ``consumed`` cannot read on without skipping removed batches (C5 on Spark)."""
    horizon = feed_horizon(spark, feed)
    if consumed < horizon:
        raise FellBehindRetention(behind_message(consumer, feed, consumed, horizon))


def behind_message(consumer: str, feed: str, consumed: int, horizon: int) -> str:
    return (
        f"{consumer} fell behind retention on feed {feed}: it has consumed the feed up to "
        f"batch {consumed}, but retention removed every batch up to {horizon} (the horizon), "
        f"so reading on would skip the events of the removed batches above {consumed}. "
        f"Fix: {CONSUMER_FIX}"
    )


def plan_sql(table: str, newest: int, max_age_ms: int | None, keep_last: int | None) -> str:
    """Per shard: its newest batch (its head), the oldest batch its newest ``keep_last``
    events need, and its oldest batch holding an event younger than ``max_age_ms``.
    One scan of the ``shard_id`` and ``ulid`` columns of the batches up to ``newest``."""
    young = (
        "cast(null as bigint)"
        if max_age_ms is None
        else f"min(case when ms >= unix_millis(current_timestamp()) - {max_age_ms} then b end)"
    )
    if keep_last is None:
        keep = "cast(null as bigint)"
    elif keep_last == 0:
        keep = f"cast({newest + 1} as bigint)"  # no batch is needed for no event
    else:
        keep = f"coalesce(max(case when newer >= {keep_last} then b end), min(b))"
    return (
        f"select s, max(b) as last_batch, {keep} as keep_from, {young} as young_from from ("
        f" select s, b, ms, sum(n) over (partition by s order by b desc"
        f" rows between unbounded preceding and current row) as newer from ("
        f"  select {SHARD_COLUMN} as s, {BATCH_COLUMN} as b, count(*) as n,"
        f"  cast(conv(hex(substring(max({ULID_COLUMN}), 1, 6)), 16, 10) as bigint) as ms"
        f"  from {table} where {BATCH_COLUMN} <= {newest}"
        f"  group by {SHARD_COLUMN}, {BATCH_COLUMN})) group by s"
    )


def _age_ms(max_age: timedelta | float | None) -> int | None:
    if max_age is None:
        return None
    if isinstance(max_age, bool) or not isinstance(max_age, (timedelta, int, float)):
        raise ValueError(
            f"max_age must be a timedelta or a number of seconds (0 or more), got {max_age!r}"
        )
    seconds = max_age.total_seconds() if isinstance(max_age, timedelta) else float(max_age)
    if seconds < 0:
        raise ValueError(f"max_age must be 0 or more, got {max_age!r}")
    return int(seconds * 1000)


def _check_arguments(
    max_age: timedelta | float | None,
    keep_last: int | None,
    consumers: Sequence[str],
    override_consumers: bool,
) -> int | None:
    if max_age is None and keep_last is None:
        raise ValueError(
            "retention needs a policy: max_age (remove batches whose events are all older), "
            "keep_last (keep the batches holding each shard's newest N events), or both"
        )
    if keep_last is not None and (
        isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0
    ):
        raise ValueError(f"keep_last must be an integer, 0 or more, got {keep_last!r}")
    if isinstance(consumers, str) or not all(isinstance(c, str) for c in consumers):
        raise ValueError(
            "consumers must be a list of the output tables of every consumer of the feed "
            f"('schema.table'; [] if it has none), got {consumers!r}"
        )
    if not isinstance(override_consumers, bool):
        raise ValueError(f"override_consumers must be true or false, got {override_consumers!r}")
    return _age_ms(max_age)


def retain(
    spark: Any,
    table: str,
    *,
    consumers: Sequence[str],
    max_age: timedelta | float | None = None,
    keep_last: int | None = None,
    override_consumers: bool = False,
) -> RetentionResult:
    """Remove the feed's oldest batches that the policy lets go (protocol 11.7).

    A batch goes, whole, when every batch below it goes too and no rule keeps it: a batch
    holding an event younger than ``max_age`` (a timedelta or seconds) is kept, so is
    every batch holding one of a shard's newest ``keep_last`` events, every shard's newest
    batch (its head: publishers and landings derive their state from it), and, unless
    ``override_consumers``, every batch above the cursor of a consumer in ``consumers``.

    ``consumers`` lists the output table of **every** consumer of the feed (``[]`` for
    none); retention cannot find them itself, and one left out can fall behind (it then
    fails with "fell behind retention", never skips). An output that does not exist yet
    keeps the whole feed. parquet: drops the partitions one by one, oldest first, so a
    killed run leaves a shorter contiguous feed; delta/iceberg: one delete transaction.
    """
    feed = FeedTable.for_name(spark, table)
    age_ms = _check_arguments(max_age, keep_last, consumers, override_consumers)
    for name in consumers:
        FeedTable.for_name(spark, name)  # a malformed name fails before anything is read
    outputs = list(consumers)
    if not feed.exists():
        raise ValueError(f"feed table {table} does not exist")
    fmt = feed.format()
    acid = fmt != "parquet"
    found = feed.batch_range(fmt)
    if found is None:
        return RetentionResult(table, 0, 0, None, None, 0, None, 0, None)
    low, newest = found
    # Read before the plan: a cursor only moves up, so the limit stays safe while the plan runs.
    cursors = {} if override_consumers else {c: consumed_batch(spark, c) or 0 for c in outputs}
    shards = spark.sql(plan_sql(feed.name.sql, newest, age_ms, keep_last)).collect()
    policy = [newest - 1]  # the newest batch always stays (C7)
    if age_ms is not None:
        young = [int(r["young_from"]) for r in shards if r["young_from"] is not None]
        policy.append(min(young) - 1 if young else newest)
    if keep_last is not None:
        policy.append(min(int(r["keep_from"]) for r in shards) - 1)
    wanted = min(policy)
    head = min(shards, key=lambda r: (int(r["last_batch"]), int(r["s"])))
    head_limit = int(head["last_batch"]) - 1
    cut = min(wanted, head_limit)
    slowest = min(cursors, key=lambda c: (cursors[c], c)) if cursors else None
    consumer_limit = cursors[slowest] if slowest is not None else cut
    upto = min(cut, consumer_limit)
    if upto >= low:
        _remove(spark, feed.name.sql, acid, low, upto)
    horizon = max(low - 1, upto)
    return RetentionResult(
        table=table,
        removed_batches=max(0, upto - low + 1),
        horizon=horizon,
        oldest_batch=horizon + 1,
        newest_batch=newest,
        held_for_consumers=max(0, cut - max(consumer_limit, low - 1)),
        slowest_consumer=slowest if cut > consumer_limit and cut >= low else None,
        held_for_head=max(0, wanted - max(head_limit, low - 1)),
        head_shard=int(head["s"]) if wanted > head_limit and wanted >= low else None,
    )


def _remove(spark: Any, table: str, acid: bool, low: int, upto: int) -> None:
    if acid:
        spark.sql(f"delete from {table} where {BATCH_COLUMN} <= {upto}")
        return
    # One partition per statement, oldest first: a run killed in between leaves the
    # batches contiguous, so the horizon stays derivable from the lowest one.
    for batch in range(low, upto + 1):
        spark.sql(f"alter table {table} drop if exists partition ({BATCH_COLUMN} = {batch})")
