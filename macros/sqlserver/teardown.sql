{#- sqlserver__teardown_feed: the sqlserver implementation of changefeed.teardown_feed (macros/teardown_feed.sql). -#}
{% macro sqlserver__teardown_feed(relation) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {{ return(changefeed._sqlserver_teardown_feed(changefeed._feed_identity(changefeed._feed_relation(relation)))) }}
{% endmacro %}

{#- Drops one feed's objects, roles and history on SQL Server (see _sqlserver_teardown_batch). -#}
{% macro _sqlserver_teardown_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'teardown', changefeed._sqlserver_teardown_batch(spec))) }}
{% endmacro %}
