{#- How to name the feed's table in a `dbt run-operation ... --args` example: schema.table
    when both parts are plain identifiers, else the {schema, table} mapping. -#}
{% macro _postgres_relation_arg(spec) %}
  {%- set plain = modules.re.compile('^[A-Za-z_][A-Za-z0-9_]*$') -%}
  {%- if plain.match(spec['source_schema']) and plain.match(spec['source_table']) -%}
    {{ return(spec['source_schema'] ~ '.' ~ spec['source_table']) }}
  {%- endif -%}
  {{ return('{schema: ' ~ tojson(spec['source_schema']) ~ ', table: ' ~ tojson(spec['source_table']) ~ '}') }}
{% endmacro %}
