{#- A dbt model with a feed (tests/test_pg_feed_models.py): incremental, mode: outbox,
    capture: trigger, configured under meta (cf_orders_published uses the top-level key).
    The vars let a test change what a run writes and how: rows cf_orders_from..cf_orders_upto
    with note version cf_orders_version, merged on order_id by cf_orders_strategy.
    Enabled only on PostgreSQL targets. -#}
{{ config(
    materialized='incremental',
    unique_key='order_id',
    incremental_strategy=var('cf_orders_strategy', 'merge'),
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'outbox', 'capture': 'trigger', 'key': ['order_id']}},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select g::bigint as order_id, 'order ' || g::text || ' v{{ var("cf_orders_version", 1) }}' as note
  from generate_series({{ var('cf_orders_from', 1) }}, {{ var('cf_orders_upto', 3) }}) as g
