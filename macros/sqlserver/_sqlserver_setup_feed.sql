{#- Sets up one feed on SQL Server (see _sqlserver_setup_batch); returns the action. -#}
{% macro _sqlserver_setup_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'setup', changefeed._sqlserver_setup_batch(spec))) }}
{% endmacro %}
