{#- Negative case (tests/test_pg_feed_models.py): an incremental model whose feed could not
    record dbt's writes (blocking mode: dbt takes no shard lock). -#}
{{ config(
    materialized='incremental',
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'blocking', 'key': ['id']}},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select 1::bigint as id
