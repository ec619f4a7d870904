{#- Runs a query whose single row and column is JSON text and returns it parsed (none for no
    row). Every catalogue read goes through this, so that agate's type guessing never
    turns a column or table name such as "2024" or "true" into a number or a boolean. -#}
{% macro _postgres_query_json(sql) %}
  {%- set result = run_query('select (' ~ sql ~ ')::text as cf_json') -%}
  {%- if result is none or result.rows | length == 0 or result.rows[0][0] is none -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(fromjson(result.rows[0][0])) }}
{% endmacro %}
