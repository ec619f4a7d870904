{#-
  The partition switch of a parquet state (docs/protocol.md 11.8, S3): the new partitions
  are written whole into new directories, and each partition is then switched to its new
  directory by one metastore call. A partition's old directory is deleted only after
  every partition has been switched, so a kill at any moment leaves each partition either
  its old rows or its new ones, never neither (Spark's own dynamic partition overwrite
  deletes a partition's directory before it renames the new one in). The rewrite layout
  switches buckets (changefeed_bucket) of the state table; the layers layout
  (_spark_scd_layers.sql) adds a layer (changefeed_layer) of <state>__changefeed_layers.

  Layout, under the table's location L, for partition column <c>:
    L/changefeed_versions/<c>=<value>/changefeed_write=<dbt invocation id>/
  written through <table>__changefeed_next, an external table over L/changefeed_versions
  partitioned by (<c>, changefeed_write): each run writes fresh directories, so no write
  ever deletes a directory a partition points to. The superseded directories are deleted
  by dropping <table>__changefeed_superseded, a managed table whose partitions are
  pointed at them (dropping a managed table deletes its partitions' locations; there is
  no SQL to delete a directory). A run killed before that drop leaves it to the next run;
  directories of a killed write that were never switched to stay as debris (never read:
  readers list registered partitions only) until a --full-refresh, which drops L with
  everything under it.
-#}
{% macro _spark_scd_helper_relation(state, suffix) %}
  {{ return(state.incorporate(path={'identifier': state.identifier ~ suffix})) }}
{% endmacro %}


{#- Write `rows` (a select of whole partitions: the table's columns, by name) and switch the partitions `values` of `target` to
    them; a partition of `values` that `rows` leaves empty is dropped. The new directories
    are named by the run's invocation id and `step`, which a second switch of the same
    table in one run must set to another value (its directories would be the first's). -#}
{% macro _spark_scd_switch_partitions(target, column, rows, values, step='') %}
  {%- set next = changefeed._spark_scd_helper_relation(target, '__changefeed_next') -%}
  {%- set superseded = changefeed._spark_scd_helper_relation(target, '__changefeed_superseded') -%}
  {#-- a killed run's superseded table holds only directories it had already switched away from --#}
  {%- do run_query('drop table if exists ' ~ superseded) -%}
  {%- do run_query('drop table if exists ' ~ next) -%}

  {%- set location = changefeed._spark_table_location(target) -%}
  {%- set versions = location ~ '/changefeed_versions' -%}
  {%- set write = (invocation_id | replace('-', '')) ~ step -%}
  {%- set existing = changefeed._spark_partition_values(target) -%}
  {%- set old = {} -%}
  {%- for value in values | map('int') if value in existing -%}
    {%- do old.update({value: changefeed._spark_partition_location(target, column, value)}) -%}
  {%- endfor -%}

  {#-- 1. the new directories, complete before any partition points at them --#}
  {%- set next_columns = changefeed._spark_scd_next_columns(target, column) -%}
  {%- set typed = [] -%}
  {%- for name, type in next_columns -%}
    {%- do typed.append(adapter.quote(name) ~ ' ' ~ type) -%}
  {%- endfor -%}
  {%- do run_query('create table ' ~ next ~ ' (' ~ (typed + ['changefeed_write string']) | join(', ')
      ~ ') using parquet partitioned by (' ~ column ~ ', changefeed_write) location '
      ~ changefeed._spark_sql_string(versions)) -%}
  {%- do run_query('set spark.sql.sources.partitionOverwriteMode = DYNAMIC') -%}
  {%- call statement('main') -%}
insert overwrite table {{ next }} partition ({{ column }}, changefeed_write)
select {{ changefeed._spark_scd_list(next_columns | map(attribute=0) | list) }}, '{{ write }}' as changefeed_write
from ({{ rows }}) as changefeed_rows
  {%- endcall -%}
  {#-- a partition left without rows (a re-processing run can remove keys) has no directory --#}
  {%- set written = [] -%}
  {%- for spec in changefeed._spark_partitions(next) -%}
    {%- set parts = spec.split('/') -%}
    {%- if parts[1] == 'changefeed_write=' ~ write -%}
      {%- do written.append(parts[0].partition('=')[2] | int) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- do run_query('drop table ' ~ next) -%}

  {#-- 2. the switch: one metastore call per partition, each atomic --#}
  {%- for value in values | map('int') -%}
    {%- set spec = 'partition (' ~ column ~ ' = ' ~ value ~ ')' -%}
    {%- set path = changefeed._spark_sql_string(
        versions ~ '/' ~ column ~ '=' ~ value ~ '/changefeed_write=' ~ write) -%}
    {%- if value not in written -%}
      {#-- dropping a managed table's partition deletes its directory too --#}
      {%- do run_query('alter table ' ~ target ~ ' drop if exists ' ~ spec) -%}
      {%- do old.pop(value, none) -%}
    {%- elif value in old -%}
      {%- do run_query('alter table ' ~ target ~ ' ' ~ spec ~ ' set location ' ~ path) -%}
    {%- else -%}
      {%- do run_query('alter table ' ~ target ~ ' add ' ~ spec ~ ' location ' ~ path) -%}
    {%- endif -%}
  {%- endfor -%}

  {#-- 3. delete the directories no partition points at any more --#}
  {%- if old -%}
    {%- set parts = [] -%}
    {%- for value, path in old.items() -%}
      {%- do parts.append('partition (changefeed_part = ' ~ value ~ ') location ' ~ changefeed._spark_sql_string(path)) -%}
    {%- endfor -%}
    {%- do run_query('create table ' ~ superseded ~ ' (changefeed_unused int, changefeed_part bigint)'
        ~ ' using parquet partitioned by (changefeed_part)') -%}
    {#-- its own location must exist, or the drop logs "Failed to delete" (11.5) --#}
    {%- do run_query('truncate table ' ~ superseded) -%}
    {%- do run_query('alter table ' ~ superseded ~ ' add ' ~ parts | join(' ')) -%}
    {%- do run_query('drop table ' ~ superseded) -%}
  {%- endif -%}
{% endmacro %}


{#- The columns of <table>__changefeed_next, (name, type): the table's, the partition
    column `column` last (the table's types, read from it so that the write keeps them
    exactly; its order, so that the write, which selects them by name, matches a table
    whose columns were added to after it was created). -#}
{% macro _spark_scd_next_columns(target, column) %}
  {%- set columns = [] -%}
  {%- set partition = [] -%}
  {%- for name, type in changefeed._spark_table_layout(target).columns -%}
    {%- do (partition if name == column else columns).append((name, type)) -%}
  {%- endfor -%}
  {{ return(columns + partition) }}
{% endmacro %}


{% macro _spark_sql_string(text) %}
  {{ return("'" ~ text | replace('\\', '\\\\') | replace("'", "\\'") ~ "'") }}
{% endmacro %}
