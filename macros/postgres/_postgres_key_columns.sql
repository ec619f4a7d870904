{#-
  The key columns of a source table, for the feed spec: a list of
  {"name", "data_type", "collation"} with data_type as PostgreSQL formats it
  (format_type) and collation none unless it differs from the type's default (then the
  qualified, quoted collation name). key_names none means the table's primary key.
-#}
{% macro _postgres_key_columns(relation, key_names) %}
  {%- set shown = relation.schema ~ '.' ~ relation.identifier -%}
  {%- if relation.database and target.database and relation.database != target.database -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: " ~ shown ~ " is in database " ~ relation.database ~ " but the connection is to "
        ~ target.database ~ "; PostgreSQL feeds live in the database of their table") }}
  {%- endif -%}
  {%- set columns = changefeed._postgres_query_json("
    select pg_catalog.json_agg(pg_catalog.json_build_object(
             'name', a.attname,
             'data_type', pg_catalog.format_type(a.atttypid, a.atttypmod),
             'collation', case when a.attcollation <> 0 and a.attcollation <> t.typcollation
                               then pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) end,
             'pk_position', pg_catalog.array_position(pk.conkey, a.attnum))
           order by a.attnum)
      from pg_catalog.pg_class as c
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
      join pg_catalog.pg_attribute as a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      join pg_catalog.pg_type as t on t.oid = a.atttypid
      left join pg_catalog.pg_collation as co on co.oid = a.attcollation
      left join pg_catalog.pg_namespace as cn on cn.oid = co.collnamespace
      left join pg_catalog.pg_constraint as pk on pk.conrelid = c.oid and pk.contype = 'p'
     where n.nspname = " ~ changefeed._postgres_literal(relation.schema) ~ "
       and c.relname = " ~ changefeed._postgres_literal(relation.identifier) ~ "
       and c.relkind in ('r', 'p', 'v', 'm', 'f')") -%}
  {%- if not columns -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: table " ~ shown ~ " does not exist (names are case-sensitive and used as written)") }}
  {%- endif -%}
  {%- set keys = [] -%}
  {%- if key_names is none -%}
    {%- for column in columns | selectattr('pk_position') | sort(attribute='pk_position') -%}
      {%- do keys.append({'name': column['name'], 'data_type': column['data_type'], 'collation': column['collation']}) -%}
    {%- endfor -%}
    {%- if keys | length == 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: table " ~ shown ~ " has no primary key, so the feed's key cannot default to it;"
          ~ " name the key columns with key: [...] (columns: " ~ columns | map(attribute='name') | join(', ') ~ ")") }}
    {%- endif -%}
  {%- else -%}
    {%- for name in key_names -%}
      {%- set found = columns | selectattr('name', 'equalto', name) | list -%}
      {%- if found | length == 0 -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: key column '" ~ name ~ "' is not a column of " ~ shown
            ~ "; its columns are: " ~ columns | map(attribute='name') | join(', ')) }}
      {%- endif -%}
      {%- do keys.append({'name': found[0]['name'], 'data_type': found[0]['data_type'], 'collation': found[0]['collation']}) -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(keys) }}
{% endmacro %}
