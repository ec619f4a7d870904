{#-
  Consumer of the orders feed: one row per order that changed since the last run, with
  its latest event and the order's state. `events` counts the events this run consumed
  for the order, so sum(events) is every event the model has consumed.

  Keeping only each order's latest event keeps the cursor right: the cursor of a shard
  is max(ulid) of this table's rows of that shard, and the latest event of the order
  that changed last is the highest event of the shard.
-#}
with events as (
    select e.shard_id, e.ulid, e.order_id, e.payload
    from {{ changefeed.feed_events(source('shop_landing', 'orders_feed'), this if is_incremental() else none) }} as e
),

ranked as (
    select
        events.*,
        row_number() over (partition by order_id order by ulid desc) as newest,
        count(*) over (partition by order_id) as events
    from events
)

select
    shard_id,
    ulid,
    order_id,
    payload.status as status,
    payload.amount as amount,
    payload.updated_at as updated_at,
    events,
    {{ changefeed.feed_batch() }} as changefeed_batch
from ranked
where newest = 1
