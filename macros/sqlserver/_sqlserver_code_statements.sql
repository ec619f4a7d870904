{#-
  The feed's procedures and functions, each `create or alter` through sp_executesql:
  what setup creates and upgrade re-creates. Order matters: callers after callees. In
  outbox mode the capture trigger comes last (created, or dropped for capture: none).
-#}
{% macro _sqlserver_code_statements(c) %}
  {%- set bodies = [] -%}
  {%- if c.mode == 'blocking' -%}
    {%- do bodies.append(changefeed._sqlserver_sql_release(c)) -%}
    {%- do bodies.append(changefeed._sqlserver_sql_lock(c)) -%}
    {%- do bodies.append(changefeed._sqlserver_sql_update_state(c)) -%}
    {%- do bodies.append(changefeed._sqlserver_sql_ulid(c)) -%}
  {%- else -%}
    {%- do bodies.append(changefeed._sqlserver_sql_feed_write_lock(c)) -%}
  {%- endif -%}
  {%- do bodies.append(changefeed._sqlserver_sql_read_feed(c)) -%}
  {%- do bodies.append(changefeed._sqlserver_sql_safe_point(c)) -%}
  {%- do bodies.append(changefeed._sqlserver_sql_tombstone(c)) -%}
  {%- do bodies.append(changefeed._sqlserver_sql_barrier_acquire(c)) -%}
  {%- do bodies.append(changefeed._sqlserver_sql_barrier_check(c)) -%}
  {%- do bodies.append(changefeed._sqlserver_sql_shards(c)) -%}
  {%- set statements = [] -%}
  {%- for body in bodies -%}
    {%- do statements.append(changefeed._sqlserver_exec(body)) -%}
  {%- endfor -%}
  {{ return(statements + changefeed._sqlserver_capture_statements(c)) }}
{% endmacro %}
