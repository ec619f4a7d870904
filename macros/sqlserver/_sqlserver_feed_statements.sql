{#-
  Every T-SQL statement that creates a feed's objects, in order (pure: no queries). The
  shared schema and registry first, then tables, sequence, type and roles, then the
  procedures and functions, then the grants. _sqlserver_setup_batch runs exactly these,
  guarded, in one transaction; the render tests parse each of them.
-#}
{% macro _sqlserver_feed_statements(spec) %}
  {%- set c = changefeed._sqlserver_feed_context(changefeed._sqlserver_require_mode(spec)) -%}
  {{ return(changefeed._sqlserver_shared_statements(c)
      + changefeed._sqlserver_object_statements(c)
      + changefeed._sqlserver_capture_check(c)
      + changefeed._sqlserver_code_statements(c)
      + changefeed._sqlserver_grant_statements(c)) }}
{% endmacro %}
