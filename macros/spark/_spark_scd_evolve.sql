{#-
  A state model's tables follow its select's columns (docs/spark.md "When the source's
  columns change"; docs/protocol.md 11.12): before a run applies its window, every table
  that holds the state (the state, a layers table, a repeats table) gets the select's new
  columns, and the new fields of its struct columns, and its widened types. Older rows
  read them as null. Anything else (a column no longer selected, a narrowing, another
  type change) fails the run before any write, naming the change and the fix.

  How each format takes them:
    delta, iceberg   in place: a column added (after the select's column before it), a
                     struct's field added (at the struct's end), a type widened (Delta:
                     type widening; Iceberg: its type promotion; the same rules as a
                     landed table's)
    parquet          a column added in place (after the table's other columns: the
                     partition switch writes by name); a struct's new field or a widened
                     type by re-declaring the table (_spark_scd_redeclare.sql: a copy of
                     the state with the new schema takes its name), as Spark's SQL alters
                     no struct field and no type of a parquet table
-#}
{#- Returns the relations it changed. -#}
{% macro _spark_scd_follow_select(materialization, relations, staged, file_format) %}
  {%- set wanted = [] -%}
  {%- for name, type in changefeed._spark_table_layout(staged).columns -%}
    {%- do wanted.append((name, changefeed._spark_stored_type(type, file_format))) -%}
  {%- endfor -%}
  {%- set own = changefeed._spark_scd_added_columns(materialization) + ['changefeed_layer'] -%}
  {%- set who = "changefeed: model '" ~ model.name ~ "' (materialized='" ~ materialization ~ "')" -%}
  {%- set changed = [] -%}
  {%- for relation in relations -%}
    {%- set have = changefeed._spark_table_layout(relation).columns -%}
    {%- set held = {} -%}
    {%- for name, type in have if name not in own -%}
      {%- do held.update({name: type}) -%}
    {%- endfor -%}
    {%- set selected = wanted | map(attribute=0) | list -%}
    {%- for name in held if name not in selected -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": its state " ~ relation ~ " holds the column " ~ name ~ ", which the select no longer"
          ~ " returns; select it again (null as " ~ name ~ " where its source column was dropped: the"
          ~ " landed table keeps it, null from then on), or rebuild the model with dbt run"
          ~ " --full-refresh") }}
    {%- endfor -%}
    {%- set changes = namespace(added=[], widened=[], redeclare=false) -%}
    {%- for name, type in wanted -%}
      {%- if name not in held -%}
        {%- set before = none if loop.first else wanted[loop.index0 - 1][0] -%}
        {%- do changes.added.append((adapter.quote(name), type, before, true)) -%}
      {%- elif held[name] != type -%}
        {%- do changefeed._spark_scd_type_changes(who, relation, adapter.quote(name), held[name], type,
            file_format, changes) -%}
      {%- endif -%}
    {%- endfor -%}
    {%- if changes.redeclare -%}
      {%- do changefeed._spark_scd_redeclare(relation, wanted) -%}
    {%- else -%}
      {%- do changefeed._spark_scd_alter_columns(relation, file_format, changes) -%}
    {%- endif -%}
    {%- if changes.redeclare or changes.added or changes.widened -%}
      {%- do changed.append(relation) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(changed) }}
{% endmacro %}


{#- What turns column `path` of type `old` (the state's) into `new` (the select's): struct
    fields added at the end (recursively), a widening; anything else fails the run. -#}
{% macro _spark_scd_type_changes(who, relation, path, old, new, file_format, changes) %}
  {%- set old_fields = changefeed._spark_struct_fields(old) -%}
  {%- set new_fields = changefeed._spark_struct_fields(new) -%}
  {%- set fix = " set the select back, or rebuild the model with dbt run --full-refresh" -%}
  {%- if old_fields is not none and new_fields is not none -%}
    {%- set old_names = old_fields | map(attribute=0) | list -%}
    {%- set new_names = new_fields | map(attribute=0) | list -%}
    {%- if new_names[:old_names | length] != old_names -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": the select's " ~ path ~ " is " ~ new ~ ", its state's (" ~ relation ~ ") " ~ old
          ~ ": a struct's fields may only be added at its end (as a landed table adds a source's"
          ~ " new column);" ~ fix) }}
    {%- endif -%}
    {%- for name, type in new_fields -%}
      {%- if loop.index0 >= old_names | length -%}
        {%- if file_format == 'parquet' -%}
          {%- set changes.redeclare = true -%}
        {%- endif -%}
        {%- do changes.added.append((path ~ '.' ~ adapter.quote(name), type, none, false)) -%}
      {%- elif old_fields[loop.index0][1] != type -%}
        {%- do changefeed._spark_scd_type_changes(who, relation, path ~ '.' ~ adapter.quote(name),
            old_fields[loop.index0][1], type, file_format, changes) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- elif changefeed._spark_widens(old, new, file_format) -%}
    {%- do changes.widened.append((path, new)) -%}
  {%- elif file_format == 'parquet' and changefeed._spark_widens(old, new, 'delta') -%}
    {#-- every value of `old` is one of `new`: a copy casts it --#}
    {%- set changes.redeclare = true -%}
  {%- elif changefeed._spark_widens(old, new, 'delta') -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": the select's " ~ path ~ " is " ~ new ~ ", its state's (" ~ relation ~ ") " ~ old
        ~ ": an " ~ file_format ~ " state cannot change a decimal's scale in place (Iceberg's type"
        ~ " promotion keeps it);" ~ fix) }}
  {%- else -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": the select's " ~ path ~ " is " ~ new ~ ", its state's (" ~ relation ~ ") " ~ old
        ~ ": not a widening;" ~ fix) }}
  {%- endif -%}
{% endmacro %}


{% macro _spark_scd_alter_columns(relation, file_format, changes) %}
  {%- if changes.widened and file_format == 'delta' -%}
    {%- do run_query('alter table ' ~ relation ~ " set tblproperties ('delta.enableTypeWidening' = 'true')") -%}
  {%- endif -%}
  {%- for column, type, before, top in changes.added -%}
    {%- set place = '' -%}
    {%- if file_format != 'parquet' and top -%}
      {%- set place = ' first' if before is none else ' after ' ~ adapter.quote(before) -%}
    {%- endif -%}
    {%- do run_query('alter table ' ~ relation ~ ' add columns (' ~ column ~ ' ' ~ type ~ place ~ ')') -%}
  {%- endfor -%}
  {%- for column, type in changes.widened -%}
    {%- do run_query('alter table ' ~ relation ~ ' alter column ' ~ column ~ ' type ' ~ type) -%}
  {%- endfor -%}
{% endmacro %}


{#- (name, type) of the fields of a `struct<...>` type as Spark spells it, or none for
    another type. Names may be backquoted; types nest (struct, array, map, decimal(p,s)). -#}
{% macro _spark_struct_fields(type) %}
  {%- if not type.startswith('struct<') or not type.endswith('>') -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set body = type[7:-1] -%}
  {%- set parts = [] -%}
  {%- set state = namespace(depth=0, quoted=false, start=0) -%}
  {%- for char in body -%}
    {%- if char == '`' -%}
      {%- set state.quoted = not state.quoted -%}
    {%- elif not state.quoted and char in '<(' -%}
      {%- set state.depth = state.depth + 1 -%}
    {%- elif not state.quoted and char in '>)' -%}
      {%- set state.depth = state.depth - 1 -%}
    {%- elif not state.quoted and state.depth == 0 and char == ',' -%}
      {%- do parts.append(body[state.start:loop.index0]) -%}
      {%- set state.start = loop.index0 + 1 -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if body -%}
    {%- do parts.append(body[state.start:]) -%}
  {%- endif -%}
  {%- set fields = [] -%}
  {%- for part in parts -%}
    {%- if part.startswith('`') -%}
      {%- set end = part.index('`:', 1) -%}
      {%- do fields.append((part[1:end] | replace('``', '`'), part[end + 2:])) -%}
    {%- else -%}
      {%- set name, _, field_type = part.partition(':') -%}
      {%- do fields.append((name, field_type)) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(fields) }}
{% endmacro %}


{#- Whether a `file_format` state can change a column of type `old` to `new` in place,
    every value of `old` a value of `new` (the landing's rules, python/changefeed/spark/
    landing/_evolution.py widens). -#}
{% macro _spark_widens(old, new, file_format) %}
  {%- if file_format not in ['delta', 'iceberg'] -%}{{ return(false) }}{%- endif -%}
  {%- set integral = ['tinyint', 'smallint', 'int', 'bigint'] -%}
  {%- if old in integral and new in integral -%}
    {{ return(integral.index(new) > integral.index(old)) }}
  {%- endif -%}
  {%- if old == 'float' and new == 'double' -%}{{ return(true) }}{%- endif -%}
  {%- if old.startswith('decimal(') and new.startswith('decimal(') -%}
    {%- set p, s = old[8:-1].split(',') | map('int') | list -%}
    {%- set q, t = new[8:-1].split(',') | map('int') | list -%}
    {%- if file_format == 'iceberg' -%}
      {{ return(t == s and q > p) }}
    {%- endif -%}
    {{ return(t >= s and q - t >= p - s and (q, t) != (p, s)) }}
  {%- endif -%}
  {{ return(false) }}
{% endmacro %}


{#- A type as a `file_format` table stores it (the landing's stored_type): Iceberg has no
    tinyint or smallint (int), and every format stores char(n) and varchar(n) as string. -#}
{% macro _spark_stored_type(type, file_format) %}
  {%- set type = modules.re.sub('\\b(var)?char\\(\\d+\\)', 'string', type) -%}
  {%- if file_format == 'iceberg' -%}
    {%- set type = modules.re.sub('\\b(tinyint|smallint)\\b', 'int', type) -%}
  {%- endif -%}
  {{ return(type) }}
{% endmacro %}
