{#- A model with a feed, configured under meta (cf_orders_published uses the top-level
    key): the post-hook sets it up (tests/test_pg_feed_setup.py).
    Enabled only on PostgreSQL targets. -#}
{{ config(
    materialized='table',
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'blocking', 'key': ['order_id'], 'stall_timeout_ms': 3000}},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select g::bigint as order_id, 'order ' || g::text as note
  from generate_series(1, 3) as g
