{#- Per feed consumer, feed and shard: cursor and lag (events and milliseconds). Disabled
    unless vars: {changefeed_health_models: true}. See models/changefeed_health.yml. -#}
{#- enabled here, not only in dbt_project.yml: dbt renders a package's dbt_project.yml
    without the user's vars, so only an in-file config() can read them. -#}
{{ config(materialized='view', enabled=var('changefeed_health_models', false)) }}
{{ changefeed._health_consumer_sql() }}
