{#- drop statements for the feed's functions and procedures (teardown). With
    mode none, every kind is dropped if it exists. -#}
{% macro _postgres_drop_routine_statements(ctx) %}
  {%- set statements = [] -%}
  {%- for kind, word in changefeed._postgres_routine_kinds(ctx['mode']) | reverse -%}
    {%- if kind in ctx['q'] -%}
      {%- do statements.append('drop ' ~ word ~ ' if exists ' ~ ctx['q'][kind]) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}
