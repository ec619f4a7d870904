{#-
  Runs one generated batch on the SQL Server connection and logs its one-row result
  (action), e.g. "changefeed: shop.orders (outbox): created".
-#}
{% macro _sqlserver_run_batch(spec, operation, batch) %}
  {%- set result = run_query(batch) -%}
  {%- set action = result.columns[0].values()[0] if result is not none and result.rows | length > 0 else 'done' -%}
  {{ log('changefeed: ' ~ operation ~ ' of ' ~ spec['feed_id'] ~ (' (' ~ spec['mode'] ~ ' mode)' if spec.get('mode') else '') ~ ': ' ~ action, info=true) }}
  {{ return(action) }}
{% endmacro %}
