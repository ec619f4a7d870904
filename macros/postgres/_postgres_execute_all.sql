{#- PL/pgSQL: EXECUTE each statement, in order, as an escaped literal. -#}
{% macro _postgres_execute_all(statements) %}
  {%- set lines = [] -%}
  {%- for statement in statements -%}
    {%- do lines.append('  execute ' ~ changefeed._postgres_literal(statement) ~ ';') -%}
  {%- endfor -%}
  {{ return(lines | join('\n')) }}
{% endmacro %}
