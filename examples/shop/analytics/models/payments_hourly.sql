{#-
  Consumer of the payments feed that aggregates: per run, shard and hour, the number of
  payments and their sum. An aggregating consumer keeps the highest feed batch it
  consumed of each group (`changefeed_feed_batch`): its cursor is the highest of its
  newest run (docs/protocol.md 11.6). `ulid` keeps each group's last event.
-#}
with payments as (
    select
        e.shard_id,
        max(e.ulid) as ulid,
        max(e.changefeed_feed_batch) as changefeed_feed_batch,
        date_trunc('HOUR', e.payload.paid_at) as hour,
        count(*) as payments,
        sum(e.payload.amount) as revenue
    from {{ changefeed.feed_events(source('shop_landing', 'payments_feed'), this if is_incremental() else none) }} as e
    group by e.shard_id, date_trunc('HOUR', e.payload.paid_at)
)

select shard_id, ulid, hour, payments, revenue, changefeed_feed_batch, {{ changefeed.feed_batch() }} as changefeed_batch
from payments
