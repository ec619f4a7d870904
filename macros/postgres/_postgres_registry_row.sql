{#- The feed's registry row as a mapping (none if the registry or the row does not exist). -#}
{% macro _postgres_registry_row(spec) %}
  {%- set registry = changefeed._postgres_ident(spec['schema']) ~ '.feeds' -%}
  {%- set found = changefeed._postgres_query_json(
      "select pg_catalog.json_build_object('t', pg_catalog.to_regclass(" ~ changefeed._postgres_literal(registry) ~ "))") -%}
  {%- if found is none or found['t'] is none -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(changefeed._postgres_query_json(
      "select pg_catalog.row_to_json(f) from " ~ registry ~ " as f where f.feed_id = "
      ~ changefeed._postgres_literal(spec['feed_id']))) }}
{% endmacro %}
