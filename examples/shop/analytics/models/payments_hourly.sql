{#-
  Consumer of the payments feed that aggregates: per run, shard and hour, the number of
  payments and their sum. An aggregating consumer keeps the highest ULID it consumed of
  each group (`ulid`), so that max(ulid) per shard, its cursor, is the last event it
  consumed (docs/protocol.md 11.6).
-#}
with payments as (
    select
        e.shard_id,
        max(e.ulid) as ulid,
        date_trunc('HOUR', e.payload.paid_at) as hour,
        count(*) as payments,
        sum(e.payload.amount) as revenue
    from {{ changefeed.feed_events(source('shop_landing', 'payments_feed'), this if is_incremental() else none) }} as e
    group by e.shard_id, date_trunc('HOUR', e.payload.paid_at)
)

select shard_id, ulid, hour, payments, revenue, {{ changefeed.feed_batch() }} as changefeed_batch
from payments
