{#-
  The parquet apply of a state consumer (docs/protocol.md 11.8, S3): the touched buckets
  are written whole into new directories, and each bucket's partition is then switched to
  its new directory by one metastore call. A bucket's old directory is deleted only after
  every touched bucket has been switched, so a kill at any moment leaves each bucket
  either its old rows or its new ones, never neither (Spark's own dynamic partition
  overwrite deletes a partition's directory before it renames the new one in).

  Layout, under the state's location L:
    L/changefeed_versions/changefeed_bucket=<b>/changefeed_write=<dbt invocation id>/
  written through <state>__changefeed_next, an external table over L/changefeed_versions
  partitioned by (changefeed_bucket, changefeed_write): each run writes fresh directories,
  so no write ever deletes a directory a partition points to. The superseded directories
  are deleted by dropping <state>__changefeed_superseded, a managed table whose
  partitions are pointed at them (dropping a managed table deletes its partitions'
  locations; there is no SQL to delete a directory). A run killed before that drop
  leaves it to the next run; directories of a killed write that were never switched to
  stay as debris (never read: readers list registered partitions only) until a
  --full-refresh, which drops L with everything under it.
-#}
{% macro _spark_scd_helper_relation(state, suffix) %}
  {{ return(state.incorporate(path={'identifier': state.identifier ~ suffix})) }}
{% endmacro %}


{#- Write `rows` (a select of whole touched buckets, the state's columns in table order) and
    switch the state's partitions `touched` to them. -#}
{% macro _spark_scd_switch_buckets(target, rows, touched) %}
  {%- set next = changefeed._spark_scd_helper_relation(target, '__changefeed_next') -%}
  {%- set superseded = changefeed._spark_scd_helper_relation(target, '__changefeed_superseded') -%}
  {#-- a killed run's superseded table holds only directories it had already switched away from --#}
  {%- do run_query('drop table if exists ' ~ superseded) -%}
  {%- do run_query('drop table if exists ' ~ next) -%}

  {%- set location = changefeed._spark_table_location(target) -%}
  {%- set versions = location ~ '/changefeed_versions' -%}
  {%- set write = invocation_id | replace('-', '') -%}
  {%- set existing = [] -%}
  {%- for row in run_query('show partitions ' ~ target).rows -%}
    {%- do existing.append((row[0] | string).partition('=')[2] | int) -%}
  {%- endfor -%}
  {%- set old = {} -%}
  {%- for bucket in touched | map('int') if bucket in existing -%}
    {%- do old.update({bucket: changefeed._spark_partition_location(target, bucket)}) -%}
  {%- endfor -%}

  {#-- 1. the new directories, complete before any partition points at them --#}
  {%- do run_query('create table ' ~ next ~ ' (' ~ changefeed._spark_scd_next_columns(target)
      ~ ') using parquet partitioned by (changefeed_bucket, changefeed_write) location '
      ~ changefeed._spark_sql_string(versions)) -%}
  {%- do run_query('set spark.sql.sources.partitionOverwriteMode = DYNAMIC') -%}
  {%- call statement('main') -%}
insert overwrite table {{ next }} partition (changefeed_bucket, changefeed_write)
select *, '{{ write }}' as changefeed_write from ({{ rows }}) as changefeed_rows
  {%- endcall -%}
  {#-- a bucket left without rows (a re-processing run can remove keys) has no directory --#}
  {%- set written = [] -%}
  {%- for row in run_query('show partitions ' ~ next).rows -%}
    {%- set parts = (row[0] | string).split('/') -%}
    {%- if parts[1] == 'changefeed_write=' ~ write -%}
      {%- do written.append(parts[0].partition('=')[2] | int) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- do run_query('drop table ' ~ next) -%}

  {#-- 2. the switch: one metastore call per bucket, each atomic --#}
  {%- for bucket in touched | map('int') -%}
    {%- set path = changefeed._spark_sql_string(
        versions ~ '/changefeed_bucket=' ~ bucket ~ '/changefeed_write=' ~ write) -%}
    {%- if bucket not in written -%}
      {#-- dropping a managed table's partition deletes its directory too --#}
      {%- do run_query('alter table ' ~ target ~ ' drop if exists partition (changefeed_bucket = ' ~ bucket ~ ')') -%}
      {%- do old.pop(bucket, none) -%}
    {%- elif bucket in old -%}
      {%- do run_query('alter table ' ~ target ~ ' partition (changefeed_bucket = ' ~ bucket ~ ') set location ' ~ path) -%}
    {%- else -%}
      {%- do run_query('alter table ' ~ target ~ ' add partition (changefeed_bucket = ' ~ bucket ~ ') location ' ~ path) -%}
    {%- endif -%}
  {%- endfor -%}

  {#-- 3. delete the directories no partition points at any more --#}
  {%- if old -%}
    {%- set parts = [] -%}
    {%- for bucket, path in old.items() -%}
      {%- do parts.append('partition (changefeed_bucket = ' ~ bucket ~ ') location ' ~ changefeed._spark_sql_string(path)) -%}
    {%- endfor -%}
    {%- do run_query('create table ' ~ superseded ~ ' (changefeed_unused int, changefeed_bucket int)'
        ~ ' using parquet partitioned by (changefeed_bucket)') -%}
    {#-- its own location must exist, or the drop logs "Failed to delete" (11.5) --#}
    {%- do run_query('truncate table ' ~ superseded) -%}
    {%- do run_query('alter table ' ~ superseded ~ ' add ' ~ parts | join(' ')) -%}
    {%- do run_query('drop table ' ~ superseded) -%}
  {%- endif -%}
{% endmacro %}


{#- The columns of <state>__changefeed_next: the state's, then the write's id (the state's
    types, read from the table so that the write keeps them exactly). -#}
{% macro _spark_scd_next_columns(target) %}
  {%- set columns = [] -%}
  {%- set listing = namespace(done=false) -%}
  {%- for row in run_query('describe table ' ~ target).rows -%}
    {%- set name = row[0] | string | trim -%}
    {#-- the columns come first, then '# Partition Information' --#}
    {%- if name == '' or name.startswith('#') -%}{%- set listing.done = true -%}{%- endif -%}
    {%- if not listing.done and name | lower != 'changefeed_bucket' -%}
      {%- do columns.append(adapter.quote(name) ~ ' ' ~ (row[1] | string)) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return((columns + ['changefeed_bucket int', 'changefeed_write string']) | join(', ')) }}
{% endmacro %}


{% macro _spark_table_location(relation) %}
  {%- for row in run_query('describe table extended ' ~ relation).rows -%}
    {%- if (row[0] | string | trim | lower) == 'location' -%}
      {{ return((row[1] | string | trim).rstrip('/')) }}
    {%- endif -%}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error("changefeed: could not find the location of table " ~ relation) }}
{% endmacro %}


{% macro _spark_partition_location(relation, bucket) %}
  {%- set rows = run_query("show table extended in " ~ relation.schema ~ " like '" ~ relation.identifier
      ~ "' partition (changefeed_bucket = " ~ bucket ~ ")").rows -%}
  {%- for line in (rows[0][-1] | string).splitlines() if line.startswith('Location:') -%}
    {{ return(line[9:] | trim) }}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error(
      "changefeed: could not find the location of partition changefeed_bucket=" ~ bucket ~ " of " ~ relation) }}
{% endmacro %}


{% macro _spark_sql_string(text) %}
  {{ return("'" ~ text | replace('\\', '\\\\') | replace("'", "\\'") ~ "'") }}
{% endmacro %}
