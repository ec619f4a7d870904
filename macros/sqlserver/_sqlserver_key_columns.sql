{#-
  The key columns of a SQL Server table, from the catalogue: a list of
  {name, data_type, collation, nullable}, data_type spelled with its length, precision
  or scale, alias types replaced by their base type, the collation kept.
  key_names none -> the primary key's columns in key order (error if there is none);
  otherwise the named columns in the given order (error naming any that is missing).
-#}
{% macro _sqlserver_key_columns(relation, key_names) %}
  {%- if relation.database and target.database and relation.database | lower != target.database | lower -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: " ~ relation ~ " is in database " ~ relation.database ~ ", but dbt is connected to "
        ~ target.database ~ "; a feed lives in its table's database, so run this against "
        ~ relation.database) }}
  {%- endif -%}
  {%- set object_name = changefeed._sqlserver_quote_name(relation.schema) ~ '.'
      ~ changefeed._sqlserver_quote_name(relation.identifier) -%}
  {%- set query = changefeed._sqlserver_key_columns_query(object_name) -%}
  {%- set result = run_query(query) -%}
  {%- if result is none or result.rows | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: table " ~ object_name ~ " was not found (or has no columns you may see)") }}
  {%- endif -%}
  {%- set columns = [] -%}
  {%- for row in result.rows -%}
    {%- do columns.append({
        'name': row['column_name'],
        'data_type': changefeed._sqlserver_spell_type(
            row['type_name'], row['max_length'], row['precision'], row['scale']),
        'collation': row['collation_name'],
        'nullable': row['is_nullable'] in [true, 1],
        'key_ordinal': row['key_ordinal'],
    }) -%}
  {%- endfor -%}
  {%- set chosen = [] -%}
  {%- if key_names is none -%}
    {%- for column in columns | selectattr('key_ordinal') | sort(attribute='key_ordinal') -%}
      {%- do chosen.append(column) -%}
    {%- endfor -%}
    {%- if chosen | length == 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: " ~ object_name ~ " has no primary key; name the key columns with key: [column, ...]") }}
    {%- endif -%}
  {%- else -%}
    {%- for wanted in key_names -%}
      {%- set exact = columns | selectattr('name', 'equalto', wanted) | list -%}
      {%- set folded = [] -%}
      {%- for column in columns if column['name'] | lower == wanted | lower -%}
        {%- do folded.append(column) -%}
      {%- endfor -%}
      {%- if exact | length == 1 -%}
        {%- do chosen.append(exact[0]) -%}
      {%- elif folded | length == 1 -%}
        {%- do chosen.append(folded[0]) -%}
      {%- else -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: key column '" ~ wanted ~ "' is not a column of " ~ object_name ~ "; its columns: "
            ~ columns | map(attribute='name') | join(', ')) }}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- set keys = [] -%}
  {%- for column in chosen -%}
    {%- do keys.append({
        'name': column['name'],
        'data_type': column['data_type'],
        'collation': column['collation'],
        'nullable': column['nullable'],
    }) -%}
  {%- endfor -%}
  {{ return(keys) }}
{% endmacro %}
