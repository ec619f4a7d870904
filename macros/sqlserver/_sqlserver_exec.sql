{#-
  Wraps one T-SQL statement that must start a batch (create schema/procedure/function/
  type, and for uniformity every other DDL) in `exec sp_executesql N'...'`, so that a
  whole setup runs as ONE batch in ONE transaction.
-#}
{% macro _sqlserver_exec(sql) %}
  {{ return('exec sp_executesql ' ~ changefeed._sqlserver_literal(sql | trim) ~ ';') }}
{% endmacro %}
