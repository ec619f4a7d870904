{#-
  The layers layout of a parquet current state (parquet_layout='layers'; docs/spark.md
  "Cost"; docs/protocol.md 11.8). A parquet file cannot mark one row deleted, so a layout
  that keeps one row per key must rewrite every file holding a changed key, and random
  keys are in every file. Here a run writes only its window instead: its new rows (per
  key its newest event) become one layer, the partition changefeed_layer = n of the
  parquet table <model>__changefeed_layers, and the model itself is a view that resolves
  the layers from a base layer b up: per key, the row of the newest event in (ulid,
  shard_id) order, a later layer winning a tie (a re-processed row of the same event).

  Invariants (the L of protocol 11.8):
    L1 a layer is registered only once it is complete (_spark_scd_switch_partitions), and
       the view changes with one metastore call; a reader sees whole layers only.
    L2 the view's base b is a complete state as of its write (the first layer, or a
       compaction's) and every layer below b is superseded by it; resolution is the
       newest event per key over layers >= b, so a layer written twice (a re-run after a
       kill) or kept below b (a kill before the drop) changes no row.
    L3 once the state would hold more than max_layers layers, the run writes the whole
       resolved state with its window as its layer (a compaction), points the view at it
       and then drops the layers below it. A re-processing run always does that, with
       the touched keys' rows replaced.
  The layer number is the highest registered one plus one, so a layer is never written
  over; the cursor (_spark_scd_cursor.sql) still says which feed batches were applied.
-#}

{% macro _spark_scd_layers_relation(state) %}
  {{ return(changefeed._spark_scd_helper_relation(state, '__changefeed_layers')) }}
{% endmacro %}


{#- The view's select: layers from `base` up, resolved. Base rows no delta row beats, then
    the deltas' winners no base row beats: the base is scanned without a shuffle, and the
    window function runs over the delta layers only. -#}
{% macro _spark_scd_layers_view_sql(layers, state_columns, keys, base) %}
  {%- set sql -%}
with changefeed_delta as (
    select {{ changefeed._spark_scd_list(state_columns) }}, changefeed_layer
    from (
        select *, row_number() over (
            partition by {{ changefeed._spark_scd_list(keys) }}
            order by ulid desc, shard_id desc, changefeed_layer desc) as changefeed_rank
        from {{ layers }}
        where changefeed_layer > {{ base }}
    ) as changefeed_ranked
    where changefeed_rank = 1
)
select {{ changefeed._spark_scd_list(state_columns, 'changefeed_base') }}
from {{ layers }} as changefeed_base
left anti join changefeed_delta as changefeed_d
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_base', 'changefeed_d') }}
    and not {{ changefeed._spark_scd_newer('changefeed_base', 'changefeed_d') }}
where changefeed_base.changefeed_layer = {{ base }}
union all
select {{ changefeed._spark_scd_list(state_columns, 'changefeed_d') }}
from changefeed_delta as changefeed_d
left anti join {{ layers }} as changefeed_base
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_base', 'changefeed_d') }}
    and changefeed_base.changefeed_layer = {{ base }}
    and {{ changefeed._spark_scd_newer('changefeed_base', 'changefeed_d') }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The empty layers table (the select's columns, changefeed_deleted, changefeed_bucket,
    then the partition column changefeed_layer) and, unless `view_exists`, the view over it. -#}
{% macro _spark_scd_layers_create(target, new_rows, columns, keys, view_exists) %}
  {%- set layers = changefeed._spark_scd_layers_relation(target) -%}
  {%- if not changefeed._spark_table_listed(layers) -%}
    {%- if (flags.WHICH or '') in ['run', 'build', 'retry'] -%}
      {%- do changefeed._spark_clear_orphan_location(layers) -%}
    {%- endif -%}
    {%- do run_query('create table ' ~ layers ~ ' using parquet partitioned by (changefeed_layer) as select '
        ~ changefeed._spark_scd_list(columns + ['changefeed_deleted', 'changefeed_bucket'])
        ~ ', cast(0 as bigint) as changefeed_layer from (' ~ new_rows ~ ') as changefeed_new where false') -%}
  {%- endif -%}
  {%- if not view_exists -%}
    {%- do changefeed._spark_scd_layers_point_view(target, columns, keys, 0) -%}
  {%- endif -%}
{% endmacro %}


{% macro _spark_scd_layers_point_view(target, columns, keys, base) %}
  {%- set layers = changefeed._spark_scd_layers_relation(target) -%}
  {%- do run_query('create or replace view ' ~ target ~ ' as ' ~ changefeed._spark_scd_layers_view_sql(
      layers, columns + ['changefeed_deleted', 'changefeed_bucket'], keys, base)) -%}
{% endmacro %}


{#- The base layer the view over `target`'s layers resolves from, read from its text (the
    view's select above names it once). -#}
{% macro _spark_scd_layers_base(target) %}
  {%- set text = changefeed._spark_described(target, 'view text') or '' -%}
  {%- set found = modules.re.search('changefeed_base\\.changefeed_layer = (\\d+)', text) -%}
  {%- if found is none -%}
    {{ exceptions.raise_compiler_error("changefeed: could not read the base layer of the view " ~ target
        ~ " (not the view this materialization creates?); rebuild the model with dbt run --full-refresh") }}
  {%- endif -%}
  {{ return(found.group(1) | int) }}
{% endmacro %}


{#- A run's apply: `new_rows` (the window's rows, state columns) as a new layer, or, when
    the state would then hold more than `max_layers` layers or `replaced` is given (a
    select of the whole new state: re-processing), the whole state as the new layer
    followed by the drop of the older ones (L3). -#}
{% macro _spark_scd_layers_apply(target, columns, keys, new_rows, max_layers, replaced=none) %}
  {%- set layers = changefeed._spark_scd_layers_relation(target) -%}
  {%- set state = changefeed._spark_scd_list(columns + ['changefeed_deleted', 'changefeed_bucket']) -%}
  {%- set existing = changefeed._spark_partition_values(layers) | sort -%}
  {%- set layer = (existing | max) + 1 if existing else 1 -%}
  {%- set compact = replaced is not none or (existing | length) + 1 > max_layers -%}
  {%- if replaced is not none -%}
    {%- set rows = replaced -%}
  {%- elif compact -%}
    {#-- the view's rows and the window's, newest per key, as a rewrite of every bucket --#}
    {%- set rows = changefeed._spark_scd1_rewrite_sql(target, new_rows, columns, keys, none) -%}
  {%- else -%}
    {%- set rows = 'select ' ~ state ~ ' from (' ~ new_rows ~ ') as changefeed_new' -%}
  {%- endif -%}
  {%- do changefeed._spark_scd_switch_partitions(layers, 'changefeed_layer',
      'select *, cast(' ~ layer ~ ' as bigint) as changefeed_layer from (' ~ rows ~ ') as changefeed_layer_rows',
      [layer]) -%}
  {%- do changefeed._spark_scd_layers_point_view(
      target, columns, keys, layer if compact else (existing[0] if existing else layer)) -%}
  {%- if compact and existing -%}
    {%- set parts = [] -%}
    {%- for old in existing -%}
      {%- do parts.append('partition (changefeed_layer = ' ~ old ~ ')') -%}
    {%- endfor -%}
    {#-- dropping a managed table's partitions deletes their directories --#}
    {%- do run_query('alter table ' ~ layers ~ ' drop if exists ' ~ parts | join(', ')) -%}
  {%- endif -%}
{% endmacro %}
