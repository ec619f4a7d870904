{#- The same feed consumed with the shorthand feed_events(), keeping only shipped
    orders (a filtering consumer: filtered events are dropped, never duplicated). -#}
{{ config(
    enabled=var('changefeed_spark_it', false),
    materialized='incremental',
    incremental_strategy='insert_overwrite',
    partition_by=['changefeed_batch'],
    file_format='parquet',
) }}

select e.shard_id, e.ulid, e.order_id, e.payload.status as status, e.changefeed_feed_batch,
    {{ changefeed.feed_batch() }} as changefeed_batch
from {{ changefeed.feed_events(source('cf_spark', 'landed_orders'), this if is_incremental() else none) }} as e
where e.payload.status <> 'cancelled'
