{#- A consumer of a landed feed, written out: the safe-point filter and the
    is_incremental() branch with the cursor filter are both in the model body. -#}
{{ config(
    enabled=var('changefeed_spark_it', false),
    materialized='incremental',
    incremental_strategy='insert_overwrite',
    partition_by=['changefeed_batch'],
    file_format='parquet',
) }}
{#- Tests only: CF_TEST_ROW_SLEEP_MS slows every row, so that a test can kill the run mid-write. -#}
{%- set sleep_ms = env_var('CF_TEST_ROW_SLEEP_MS', '0') %}

select
    e.shard_id,
    e.ulid,
    e.order_id,
    upper(e.payload.status) as status,
    e.changefeed_batch as changefeed_feed_batch,
    {{ changefeed.feed_batch() }} as changefeed_batch
from {{ source('cf_spark', 'landed_orders') }} as e
where {{ changefeed.feed_safe_point(source('cf_spark', 'landed_orders'), 'e') }}
{% if is_incremental() %}
  and {{ changefeed.feed_cursor('e') }}
{% endif %}
{%- if sleep_ms != '0' %}
  and length(coalesce(reflect('java.lang.Thread', 'sleep', cast({{ sleep_ms }} + 0 * e.order_id as bigint)), 'x')) >= 0
{%- endif %}
