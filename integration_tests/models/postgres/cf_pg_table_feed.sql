{#- Negative case (tests/test_pg_feed_models.py): a table model with a feed. dbt rebuilds a
    table on every run, so the run must fail and leave the table's rows alone. -#}
{{ config(
    materialized='table',
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'blocking'}},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select 1::bigint as id, 'rebuilt by dbt' as note
