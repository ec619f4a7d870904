{#- sqlserver__setup_feed: the sqlserver implementation of changefeed.setup_feed (macros/setup_feed.sql). -#}
{% macro sqlserver__setup_feed(relation, options, model=none) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(relation, options, changefeed._sqlserver_key_columns, model) -%}
  {{ return(changefeed._sqlserver_setup_feed(spec)) }}
{% endmacro %}

{#- Sets up one feed on SQL Server (see _sqlserver_setup_batch); returns the action. -#}
{% macro _sqlserver_setup_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'setup', changefeed._sqlserver_setup_batch(spec))) }}
{% endmacro %}
