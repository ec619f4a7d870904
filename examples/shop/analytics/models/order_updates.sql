{#-
  Consumer of the orders feed: one row per order that changed since the last run, with
  its latest event and the order's state. `events` counts the events this run consumed
  for the order, so sum(events) is every event the model has consumed.

  The cursor is the highest changefeed_feed_batch of this table's newest run, so every
  row carries the highest feed batch of the events it stands for (docs/spark.md).
-#}
with events as (
    select e.shard_id, e.ulid, e.order_id, e.payload, e.changefeed_feed_batch
    from {{ changefeed.feed_events(source('shop_landing', 'orders_feed'), this if is_incremental() else none) }} as e
),

ranked as (
    select
        events.*,
        row_number() over (partition by order_id order by ulid desc) as newest,
        count(*) over (partition by order_id) as events,
        max(changefeed_feed_batch) over (partition by order_id) as consumed_batch
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
    consumed_batch as changefeed_feed_batch,
    {{ changefeed.feed_batch() }} as changefeed_batch
from ranked
where newest = 1
