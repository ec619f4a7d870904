{#- Downstream of a publishing model: consumed exactly like a landed feed. -#}
{{ config(
    enabled=var('changefeed_spark_it', false),
    materialized='incremental',
    incremental_strategy='insert_overwrite',
    partition_by=['changefeed_batch'],
    file_format='parquet',
) }}

select
    e.shard_id,
    e.ulid,
    e.order_id,
    e.status,
    e.amount,
    e.changefeed_batch as changefeed_feed_batch,
    {{ changefeed.feed_batch() }} as changefeed_batch
from {{ ref('cf_orders_published') }} as e
where {{ changefeed.feed_safe_point(ref('cf_orders_published'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
