{#- Drops one feed's objects, roles and history on SQL Server (see _sqlserver_teardown_batch). -#}
{% macro _sqlserver_teardown_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'teardown', changefeed._sqlserver_teardown_batch(spec))) }}
{% endmacro %}
