{#-
  Resolves what the user named as the source table into a Relation.
  Accepts a Relation (a model's `this`), a string "schema.table" or "database.schema.table",
  or a mapping {database?, schema, table} for names that themselves contain dots.
-#}
{% macro _feed_relation(relation) %}
  {#- A Relation first: dbt's Relation objects also pass `is mapping`. -#}
  {%- if relation is not none and relation is not string and relation.render is defined
        and relation.identifier is defined and relation.schema is defined -%}
    {{ return(relation) }}
  {%- elif relation is mapping -%}
    {%- if not relation.get('schema') or not relation.get('table') -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: relation as a mapping needs 'schema' and 'table' (and optionally 'database'); got: "
          ~ relation) }}
    {%- endif -%}
    {{ return(api.Relation.create(
        database=relation.get('database', target.database),
        schema=relation['schema'],
        identifier=relation['table'])) }}
  {%- elif relation is string -%}
    {%- set parts = relation.split('.') -%}
    {%- if parts | length == 2 and parts[0] and parts[1] -%}
      {{ return(api.Relation.create(database=target.database, schema=parts[0], identifier=parts[1])) }}
    {%- elif parts | length == 3 and parts[0] and parts[1] and parts[2] -%}
      {{ return(api.Relation.create(database=parts[0], schema=parts[1], identifier=parts[2])) }}
    {%- else -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: relation '" ~ relation ~ "' must be written schema.table or database.schema.table;"
          ~ " for names containing dots pass {schema: ..., table: ...}") }}
    {%- endif -%}
  {%- else -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: relation must be a Relation, 'schema.table' or {schema, table}; got: " ~ relation) }}
  {%- endif -%}
{% endmacro %}
