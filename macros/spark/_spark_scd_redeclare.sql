{#-
  A parquet state table re-declared with a wider schema (docs/protocol.md 11.12). Spark's
  SQL alters no struct field and no column type of a parquet table, so a state whose
  select's struct gained a field, or whose type widened, is rewritten once with the new
  schema under its own name:

    1. <table>__changefeed_evolved is created as a copy of the table, each column
       converted to its new type (a struct rebuilt with its new fields null, a null
       struct kept null; a widening cast). Spark registers a table created from a select
       only after its files are written, so once listed it is complete.
    2. The table is dropped.
    3. The table is created again as a copy of <table>__changefeed_evolved.
    4. <table>__changefeed_evolved is dropped.

  Step 3 copies rather than renames: a rename moves a managed table's directory, but not
  every metastore moves its partitions' locations with it.

  E2 (a killed re-declare loses no row). Before anything else, a run of the model finishes
  what a killed run left (_spark_scd_finish_redeclare): a copy listed beside its table is
  dropped (killed before 2, the table is as it was and the next run re-declares it again;
  or after 3, the table is re-declared), and a copy listed without its table is copied
  back to it (killed between 2 and 4: the copy is whole). No other process writes these
  tables: the model's claim is held throughout.

  Cost: two reads and two writes of the state, once per such change; readers of the model
  fail between steps 2 and 3 (as during a --full-refresh).
-#}

{% macro _spark_scd_evolved_relation(table) %}
  {{ return(changefeed._spark_scd_helper_relation(table, '__changefeed_evolved')) }}
{% endmacro %}


{#- Step 0 (E2), for the tables that may hold a model's state; returns those it restored. -#}
{% macro _spark_scd_finish_redeclare(tables) %}
  {%- set names = [] -%}
  {%- for table in tables -%}
    {%- do names.extend([table.identifier, changefeed._spark_scd_evolved_relation(table).identifier]) -%}
  {%- endfor -%}
  {%- set listed = changefeed._spark_tables_listed(tables[0].schema, names) -%}
  {%- set restored = [] -%}
  {%- for table in tables -%}
    {%- set copy = changefeed._spark_scd_evolved_relation(table) -%}
    {%- if (copy.identifier | lower) in listed -%}
      {%- if (table.identifier | lower) in listed -%}
        {%- do log("changefeed: dropping " ~ copy ~ ", the copy of a re-declare killed before it dropped " ~ table, info=true) -%}
        {%- do run_query('drop table ' ~ copy) -%}
      {%- else -%}
        {%- do log("changefeed: copying " ~ copy ~ " back to " ~ table ~ ", finishing a re-declare killed after it dropped the table", info=true) -%}
        {%- do changefeed._spark_scd_copy_back(copy, table) -%}
        {%- do restored.append(table) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(restored) }}
{% endmacro %}


{#- Steps 1 to 3: `table` re-declared with the columns `wanted` ((name, type), the select's
    columns as stored) where it has them, its other columns as they are, and wanted
    columns it lacks added (null) before its partition columns. -#}
{% macro _spark_scd_redeclare(table, wanted) %}
  {%- set types = dict(wanted) -%}
  {%- set layout = changefeed._spark_table_layout(table) -%}
  {%- set data = [] -%}
  {%- set partition = [] -%}
  {%- for name, type in layout.columns -%}
    {%- set new = types.get(name, type) -%}
    {%- set column = changefeed._spark_scd_converted(adapter.quote(name), type, new) ~ ' as ' ~ adapter.quote(name) -%}
    {%- do (partition if name in layout.partitioned_by else data).append(column) -%}
  {%- endfor -%}
  {%- set held = layout.columns | map(attribute=0) | list -%}
  {%- for name, type in wanted if name not in held -%}
    {%- do data.append('cast(null as ' ~ type ~ ') as ' ~ adapter.quote(name)) -%}
  {%- endfor -%}
  {%- set copy = changefeed._spark_scd_evolved_relation(table) -%}
  {%- do log("changefeed: re-declaring " ~ table ~ " with its select's struct fields and types (a parquet table cannot alter them in place), through the copy " ~ copy, info=true) -%}
  {%- do changefeed._spark_clear_orphan_location(copy) -%}
  {%- do run_query(changefeed._spark_scd_copy_sql(copy, layout.partitioned_by, (data + partition) | join(', '), table)) -%}
  {%- do run_query('drop table ' ~ table) -%}
  {%- do changefeed._spark_scd_copy_back(copy, table) -%}
{% endmacro %}


{#- Steps 3 and 4. -#}
{% macro _spark_scd_copy_back(copy, table) %}
  {#-- a table killed while it was created or dropped may have left its directory --#}
  {%- do changefeed._spark_clear_orphan_location(table) -%}
  {%- do run_query(changefeed._spark_scd_copy_sql(table, changefeed._spark_table_layout(copy).partitioned_by, '*', copy)) -%}
  {%- do run_query('drop table ' ~ copy) -%}
{% endmacro %}


{% macro _spark_scd_copy_sql(target, partitioned_by, columns, source) %}
  {{ return('create table ' ~ target ~ ' using parquet'
      ~ (' partitioned by (' ~ partitioned_by | join(', ') ~ ')' if partitioned_by else '')
      ~ ' as select ' ~ columns ~ ' from ' ~ source) }}
{% endmacro %}



{#- `expression` (of type `old`) as type `new`: a struct rebuilt field by field, its new
    fields null and a null struct still null; another type cast (a widening, checked by
    _spark_scd_type_changes). -#}
{% macro _spark_scd_converted(expression, old, new) %}
  {%- if old == new -%}{{ return(expression) }}{%- endif -%}
  {%- set old_fields = changefeed._spark_struct_fields(old) -%}
  {%- set new_fields = changefeed._spark_struct_fields(new) -%}
  {%- if old_fields is none or new_fields is none -%}
    {{ return('cast(' ~ expression ~ ' as ' ~ new ~ ')') }}
  {%- endif -%}
  {%- set held = dict(old_fields) -%}
  {%- set parts = [] -%}
  {%- for name, type in new_fields -%}
    {%- set field = changefeed._spark_sql_string(name) -%}
    {%- if name in held -%}
      {%- do parts.append(field ~ ', ' ~ changefeed._spark_scd_converted(
          expression ~ '.' ~ adapter.quote(name), held[name], type)) -%}
    {%- else -%}
      {%- do parts.append(field ~ ', cast(null as ' ~ type ~ ')') -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return('case when ' ~ expression ~ ' is null then null else named_struct(' ~ parts | join(', ') ~ ') end') }}
{% endmacro %}
