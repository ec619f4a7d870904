{#- Per Spark feed and shard: head, safe point, event and batch counts. Disabled unless
    vars: {changefeed_health_models: true}. See models/changefeed_health.yml. -#}
{#- enabled here, not only in dbt_project.yml: dbt renders a package's dbt_project.yml
    without the user's vars, so only an in-file config() can read them. -#}
{{ config(materialized='view', enabled=var('changefeed_health_models', false)) }}
{{ changefeed._health_feed_sql() }}
