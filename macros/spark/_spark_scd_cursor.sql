{#-
  The cursor of a state consumer (docs/protocol.md 11.8): the table <state>__changefeed_cursor,
  one row per committed run, (changefeed_feed_batch, changefeed_buckets, changefeed_batch),
  in the state's file format; parquet partitions it by changefeed_batch, so each commit is
  one partition registration (11.2). It is written after the state, and a state write is
  a guarded merge, so the cursor can lag behind the state (a re-read, harmless) but never
  run ahead of it.
-#}

{% macro _spark_scd_cursor_relation(state) %}
  {{ return(state.incorporate(path={'identifier': state.identifier ~ '__changefeed_cursor'})) }}
{% endmacro %}


{#- Whether `output` is the state of the model being run (feed_events(feed, this) in a
    changefeed_current_state or changefeed_history model). -#}
{% macro _spark_scd_is_own_state(output) %}
  {{ return(config.get('materialized') in ['changefeed_current_state', 'changefeed_history']
            and output.identifier == this.identifier and output.schema == this.schema) }}
{% endmacro %}


{#- The newest committed cursor row, {'batch', 'feed_batch', 'buckets'}, or none. Read with
    SQL, not dbt's relation cache, which does not see a table created earlier in the run. -#}
{% macro _spark_scd_cursor_row(cursor, file_format) %}
  {%- if not changefeed._spark_table_listed(cursor) -%}{{ return(none) }}{%- endif -%}
  {%- set columns = 'changefeed_batch, changefeed_feed_batch, changefeed_buckets' -%}
  {%- if file_format == 'parquet' -%}
    {%- set batches = changefeed._spark_partition_values(cursor) -%}
    {%- set newest = batches | max if batches else 0 -%}
    {%- if newest == 0 -%}{{ return(none) }}{%- endif -%}
    {%- set sql = 'select ' ~ columns ~ ' from ' ~ cursor ~ ' where changefeed_batch = ' ~ newest -%}
  {%- else -%}
    {%- set sql = 'select ' ~ columns ~ ' from ' ~ cursor ~ ' order by changefeed_batch desc limit 1' -%}
  {%- endif -%}
  {%- set rows = run_query(sql).rows -%}
  {%- if rows | length == 0 -%}{{ return(none) }}{%- endif -%}
  {{ return({'batch': rows[0][0] | int, 'feed_batch': rows[0][1] | int, 'buckets': rows[0][2] | int}) }}
{% endmacro %}


{#- The feed batch the state has consumed up to (0: from the start of the feed, also on a
    --full-refresh, which drops the cursor before the state). -#}
{% macro _spark_scd_consumed_batch(output) %}
  {%- if should_full_refresh() -%}{{ return(0) }}{%- endif -%}
  {%- set file_format = (config.get('file_format') or 'parquet') | lower -%}
  {%- set row = changefeed._spark_scd_cursor_row(changefeed._spark_scd_cursor_relation(output), file_format) -%}
  {{ return(row.feed_batch if row is not none else 0) }}
{% endmacro %}


{% macro _spark_scd_create_cursor_sql(cursor, file_format) %}
  {{ return('create table if not exists ' ~ cursor ~ ' (changefeed_feed_batch bigint, changefeed_buckets int,'
            ~ ' changefeed_batch bigint) using ' ~ file_format ~ ' partitioned by (changefeed_batch)') }}
{% endmacro %}


{#- One new cursor row: run `batch` consumed the feed up to `feed_batch`. parquet: a static
    partition overwrite, so a killed commit's unregistered directory is replaced (F2). -#}
{% macro _spark_scd_commit_cursor_sql(cursor, file_format, batch, feed_batch, buckets) %}
  {%- if file_format == 'parquet' -%}
    {{ return('insert overwrite table ' ~ cursor ~ ' partition (changefeed_batch = ' ~ batch ~ ')'
              ~ ' select cast(' ~ feed_batch ~ ' as bigint), cast(' ~ buckets ~ ' as int)') }}
  {%- endif -%}
  {{ return('insert into ' ~ cursor ~ ' values (cast(' ~ feed_batch ~ ' as bigint), cast(' ~ buckets
            ~ ' as int), cast(' ~ batch ~ ' as bigint))') }}
{% endmacro %}
