{#- A PostgreSQL string literal. E'...' with backslashes and quotes escaped, so the result
    is the same whatever standard_conforming_strings is. none renders as null. -#}
{% macro _postgres_literal(value) %}
  {%- if value is none -%}
    {{ return('null') }}
  {%- endif -%}
  {{ return("E'" ~ (value | string).replace('\\', '\\\\').replace("'", "''") ~ "'") }}
{% endmacro %}
