{#- Negative case (tests/test_pg_feed_setup.py): a changefeed config under meta and a
    different one as a top-level key. Its run fails on purpose, so tests select it alone.
    Enabled only on PostgreSQL targets. -#}
{{ config(
    materialized='table',
    enabled=(target.type == 'postgres'),
    meta={'changefeed': {'mode': 'blocking'}},
    changefeed={'mode': 'outbox'},
    post_hook="{{ changefeed.feed_post_hook() }}",
) }}
select 1::bigint as id
