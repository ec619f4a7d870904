{#- Negative case (tests/test_pg_feed_models.py): a view model with a feed. -#}
{{ config(
    materialized='view',
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'outbox', 'capture': 'trigger'}},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select 1::bigint as id
