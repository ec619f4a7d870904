{#- Re-creates one feed's procedures and functions on SQL Server (see _sqlserver_upgrade_batch). -#}
{% macro _sqlserver_upgrade_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'upgrade', changefeed._sqlserver_upgrade_batch(spec))) }}
{% endmacro %}
