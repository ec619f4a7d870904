{#-
  What the Spark macros read from the catalog, in one place: whether a table is listed,
  a table's columns and partitions, its format, its location and a partition's, a
  schema's location.
  Each is read with SQL at the moment it is needed, not from dbt's relation cache, which
  does not see a table created earlier in the run (or by another process).
-#}


{#- Whether `show tables in <schema> like '<identifier>'` lists the relation. A listing
    fails on a schema the metastore cannot read, where a lookup reads as "missing". -#}
{% macro _spark_table_listed(relation) %}
  {{ return((relation.identifier | lower) in changefeed._spark_tables_listed(relation.schema, [relation.identifier])) }}
{% endmacro %}


{#- Which of `identifiers` the schema lists (lower case), in one `show tables ... like`. -#}
{% macro _spark_tables_listed(schema, identifiers) %}
  {%- set listed = [] -%}
  {%- set pattern = identifiers | map('lower') | join('|') -%}
  {%- for row in run_query("show tables in " ~ schema ~ " like '" ~ pattern ~ "'").rows -%}
    {%- do listed.append(row[1] | string | lower) -%}
  {%- endfor -%}
  {{ return(listed) }}
{% endmacro %}


{#- A table's (or view's) columns, (name, type) in order and lower case, and its partition
    columns, from `describe`: the rows up to its first section, and those of its
    "# Partition Information" section. -#}
{% macro _spark_table_layout(relation) %}
  {%- set columns = [] -%}
  {%- set partitioned_by = [] -%}
  {%- set section = namespace(name='columns') -%}
  {%- for row in run_query('describe ' ~ relation).rows -%}
    {%- set name = row[0] | string | trim -%}
    {%- if name == '# Partition Information' -%}
      {%- set section.name = 'partitions' -%}
    {%- elif name == '' or name.startswith('#') -%}
      {%- if section.name == 'columns' -%}{%- set section.name = 'done' -%}{%- endif -%}
    {%- elif section.name == 'columns' -%}
      {%- do columns.append((name | lower, row[1] | string | trim | lower)) -%}
    {%- elif section.name == 'partitions' -%}
      {%- do partitioned_by.append(name | lower) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return({'columns': columns, 'partitioned_by': partitioned_by}) }}
{% endmacro %}


{#- The partitions of a table as the metastore lists them (`col=value[/col2=value2]`). -#}
{% macro _spark_partitions(relation) %}
  {%- set specs = [] -%}
  {%- for row in run_query('show partitions ' ~ relation).rows -%}
    {%- do specs.append(row[0] | string) -%}
  {%- endfor -%}
  {{ return(specs) }}
{% endmacro %}


{#- The values of a table's single integer partition column, from the metastore. -#}
{% macro _spark_partition_values(relation) %}
  {%- set values = [] -%}
  {%- for spec in changefeed._spark_partitions(relation) -%}
    {%- do values.append(spec.partition('=')[2] | int) -%}
  {%- endfor -%}
  {{ return(values) }}
{% endmacro %}


{#- The value of `key` (case-insensitive) in `describe table extended`, trimmed; none if
    the table has no such row. -#}
{% macro _spark_described(relation, key) %}
  {%- for row in run_query('describe table extended ' ~ relation).rows -%}
    {%- if (row[0] | string | trim | lower) == key -%}
      {{ return(row[1] | string | trim) }}
    {%- endif -%}
  {%- endfor -%}
  {{ return(none) }}
{% endmacro %}


{#- Whether an existing relation is a delta or iceberg table. dbt-spark sets is_delta and
    is_iceberg only when its relation listing read the table's details, which it does not
    for relations it cached from `show tables`; then the table's provider tells. -#}
{% macro _spark_is_acid(found) %}
  {%- if found.is_delta or found.is_iceberg -%}{{ return(true) }}{%- endif -%}
  {%- set provider = changefeed._spark_described(found, 'provider') -%}
  {{ return(provider is not none and provider | lower in ['delta', 'iceberg']) }}
{% endmacro %}


{% macro _spark_table_location(relation) %}
  {%- set location = changefeed._spark_described(relation, 'location') -%}
  {%- if location is none -%}
    {{ exceptions.raise_compiler_error("changefeed: could not find the location of table " ~ relation) }}
  {%- endif -%}
  {{ return(location.rstrip('/')) }}
{% endmacro %}


{% macro _spark_partition_location(relation, column, value) %}
  {%- set rows = run_query("show table extended in " ~ relation.schema ~ " like '" ~ relation.identifier
      ~ "' partition (" ~ column ~ " = " ~ value ~ ")").rows -%}
  {%- for line in (rows[0][-1] | string).splitlines() if line.startswith('Location:') -%}
    {{ return(line[9:] | trim) }}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error(
      "changefeed: could not find the location of partition " ~ column ~ "=" ~ value ~ " of " ~ relation) }}
{% endmacro %}


{% macro _spark_schema_location(schema) %}
  {%- set rows = run_query('describe schema extended ' ~ adapter.quote(schema)) -%}
  {%- for row in rows.rows -%}
    {%- if (row[0] | string | trim | lower) in ['location', 'database location', 'namespace location'] -%}
      {{ return(row[1] | string | trim) }}
    {%- endif -%}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error("changefeed: could not find the location of schema " ~ schema) }}
{% endmacro %}
