{#- A model that publishes a feed: each run appends the orders updated since its last
    run as one batch, sharded by region, with ULIDs from one block per shard and run. -#}
{{ config(
    enabled=var('changefeed_spark_it', false),
    materialized='incremental',
    incremental_strategy='insert_overwrite',
    partition_by=['changefeed_batch'],
    file_format='parquet',
    changefeed={
        'key': ['order_id'],
        'shard': 'region',
        'time_hint': env_var('CF_TEST_TIME_HINT_MS', 'unix_millis(current_timestamp())'),
    },
) }}
{#- Tests only: CF_TEST_ROW_SLEEP_MS slows every row, so that a test can kill the run mid-write. -#}
{%- set sleep_ms = env_var('CF_TEST_ROW_SLEEP_MS', '0') %}

{% call changefeed.publish_feed() %}
select o.order_id, o.status, o.amount, o.updated_at, o.region
from {{ source('cf_spark', 'shop_orders') }} as o
where o.order_id is not null
{% if is_incremental() %}
  and o.updated_at > coalesce((select max(updated_at) from {{ this }}), timestamp'1970-01-01 00:00:00')
{% endif %}
{%- if sleep_ms != '0' %}
  and length(coalesce(reflect('java.lang.Thread', 'sleep', cast({{ sleep_ms }} + 0 * o.order_id as bigint)), 'x')) >= 0
{%- endif %}
{% endcall %}
