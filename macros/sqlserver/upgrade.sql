{#- sqlserver__upgrade_feed: the sqlserver implementation of changefeed.upgrade_feed (macros/upgrade_feed.sql). -#}
{% macro sqlserver__upgrade_feed(relation, options) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(relation, options, changefeed._sqlserver_key_columns) -%}
  {{ return(changefeed._sqlserver_upgrade_feed(spec)) }}
{% endmacro %}

{#- Re-creates one feed's procedures and functions on SQL Server (see _sqlserver_upgrade_batch). -#}
{% macro _sqlserver_upgrade_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'upgrade', changefeed._sqlserver_upgrade_batch(spec))) }}
{% endmacro %}
