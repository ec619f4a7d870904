{#-
  The orchestration of the state consumers changefeed_current_state and changefeed_history
  (docs/spark.md, "Current state and history"; docs/protocol.md 11.8). The model's select
  is the run's window of feed events (feed_events(feed, this): literal bounds, read before
  this runs); the phases below apply it and then commit the cursor. Validation is in
  _spark_scd_rules.sql, the statements in _spark_scd_sql.sql, the cursor in
  _spark_scd_cursor.sql, the relations the model consists of (its shape) in
  _spark_scd_shape.sql.
-#}
{% macro _spark_scd_materialize(materialization) %}
  {#-- 1. Validate, before any statement --#}
  {%- set rules = changefeed._spark_scd_rules(materialization) -%}
  {%- set file_format = rules.file_format -%}
  {#-- taken when the window was rendered (feed_events), before its cursor was read; a
      model whose select calls none of the feed macros takes it here --#}
  {%- if not changefeed._spark_claim_taken_by_select(model) -%}
    {%- do changefeed._spark_claim_take() -%}
  {%- endif -%}
  {#-- target: where the state lives (_spark_scd_shape.sql); the cursor is the model's --#}
  {%- set target = changefeed._spark_scd_state_relation(rules) -%}
  {%- set cursor = changefeed._spark_scd_cursor_relation(this.incorporate(type='table')) -%}
  {%- set staged = (this.identifier ~ '__changefeed_events') | lower -%}
  {%- set full_refresh = should_full_refresh() -%}
  {%- if file_format == 'parquet' -%}
    {%- do changefeed._spark_check_partition_management(materialization) -%}
  {%- endif -%}
  {%- set layered = rules.layout == 'layers' -%}
  {%- set removed = rules.deletes == 'remove' -%}
  {%- if removed -%}
    {%- do changefeed._spark_scd_check_views(materialization) -%}
  {%- endif -%}
  {%- set state_name = changefeed._spark_scd_removed_state() -%}
  {%- set holders = [changefeed._spark_scd_layers_relation(target) if layered else target,
                     changefeed._spark_scd_repeats_relation(target)] -%}
  {#-- a parquet re-declare a killed run left half done is finished first (E2) --#}
  {%- set recovered = changefeed._spark_scd_finish_redeclare(holders) if file_format == 'parquet' else [] -%}
  {%- set built = changefeed._spark_scd_built_shape(state_name) -%}
  {%- if not full_refresh -%}
    {%- do changefeed._spark_scd_check_shape(changefeed._spark_scd_wanted_shape(rules), built) -%}
  {%- endif -%}
  {%- set committed = none if full_refresh else changefeed._spark_scd_cursor_row(cursor, file_format) -%}
  {#-- changefeed_reprocess: rebuild the keys of a range instead of applying new events --#}
  {%- set range = changefeed._spark_scd_reprocess_range(materialization) -%}
  {%- if committed is not none and committed.buckets != rules.buckets -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' was built with buckets=" ~ committed.buckets
        ~ " and is now configured with buckets=" ~ rules.buckets ~ "; a key's bucket depends on it,"
        ~ " so set buckets back to " ~ committed.buckets ~ " or rebuild with dbt run --full-refresh") }}
  {%- endif -%}

  {{ run_hooks(pre_hooks) }}

  {#-- 2. Stage the window once; its bounds are literals, so a re-run stages the same events --#}
  {#-- (replaced, not created: a failed run in a session that lives on, e.g. dbt's session
      method, leaves its view behind) --#}
  {%- call statement('changefeed_stage') -%}
    create or replace temporary view {{ staged }} as {{ compiled_code }}
  {%- endcall -%}
  {%- if range is none -%}
    {#-- a re-processing run reads only the touched keys' events (cached there) --#}
    {%- do run_query('cache table ' ~ staged) -%}
  {%- endif -%}
  {%- set columns = run_query('select * from ' ~ staged ~ ' limit 0').column_names | map('lower') | list -%}
  {%- do changefeed._spark_scd_check_columns(materialization, columns, rules.key_columns) -%}
  {#-- the state's tables take the select's new columns and types (_spark_scd_evolve.sql) --#}
  {%- if built is not none and not full_refresh -%}
    {%- set following = holders[:1] -%}
    {%- if materialization == 'changefeed_history' and 'changefeed_operation' in columns
          and changefeed._spark_table_listed(holders[1]) -%}
      {%- do following.append(holders[1]) -%}
    {%- endif -%}
    {%- set changed = changefeed._spark_scd_follow_select(materialization, following, staged, file_format) -%}
    {%- if layered and (changed or recovered) -%}
      {#-- a view keeps the column types it was created with: it is pointed again, at its base --#}
      {%- do changefeed._spark_scd_layers_point_view(target, columns, rules.key_columns,
          changefeed._spark_scd_layers_base(target)) -%}
    {%- endif -%}
  {%- endif -%}
  {%- set delete_when = rules.delete_when -%}
  {%- if delete_when is none and 'payload' in columns -%}
    {#-- a landed feed: its payload is the source row at landing time, null once the key is gone --#}
    {%- set delete_when = 'payload is null' -%}
  {%- endif -%}
  {%- if range is not none -%}
    {%- do changefeed._spark_scd_reprocess_apply(materialization, rules, target, staged, columns, delete_when, range) -%}
    {%- do run_query('drop view if exists ' ~ staged) -%}
    {{ run_hooks(post_hooks) }}
    {%- do changefeed._spark_claim_give_up() -%}
    {{ return({'relations': [this.incorporate(type='view') if layered or removed else target]}) }}
  {%- endif -%}
  {%- set new_rows = changefeed._spark_scd_new_rows(
      materialization, staged, columns, rules.key_columns, delete_when, rules.buckets, rules.versions) -%}
  {#-- a history that selects the operation tells its versions apart and keeps a snapshot's
      repeated reads aside (_spark_scd_operation.sql) --#}
  {%- set operations = materialization == 'changefeed_history' and 'changefeed_operation' in columns -%}
  {#-- the cursor moves to the window's highest feed batch, whether its events won or not --#}
  {%- set window = run_query(
      "select count(*), max(changefeed_feed_batch), concat_ws(',', array_sort(collect_set(changefeed_bucket))), "
      ~ ("count_if(changefeed_operation = 'snapshot')" if operations else "0")
      ~ " from (select changefeed_feed_batch, " ~ ("changefeed_operation, " if operations else "")
      ~ changefeed._spark_scd_bucket(rules.key_columns, rules.buckets)
      ~ " as changefeed_bucket from " ~ staged ~ ") as changefeed_window").rows[0] -%}
  {%- set events, feed_batch = window[0] | int, window[1] -%}
  {%- set touched = (window[2] | string).split(',') if events > 0 else [] -%}
  {%- set snapshot_reads = window[3] | int -%}

  {#-- 3. Full refresh: drop the cursor before the state, so a kill in between only re-reads;
      then every relation of the shape the model was built in --#}
  {%- if full_refresh -%}
    {%- do run_query('drop table if exists ' ~ cursor) -%}
    {%- if built in ['layers', 'remove', 'remove, layers'] -%}
      {%- do run_query('drop view if exists ' ~ this.incorporate(type='view')) -%}
    {%- elif built == 'table' -%}
      {%- do run_query('drop table if exists ' ~ this.incorporate(type='table')) -%}
    {%- endif -%}
    {#-- the helpers of every shape, whatever the model is: a full refresh killed after it
        dropped the model left them, and a layers table left behind would be resolved again
        (a 'remove' shape is found by its helper, so `built` says whether that is a view) --#}
    {%- if built in ['remove', 'remove, layers'] -%}
      {%- do run_query('drop ' ~ ('view' if built == 'remove, layers' else 'table') ~ ' if exists ' ~ state_name) -%}
    {%- endif -%}
    {%- for owner in [this.incorporate(type='table'), state_name] -%}
      {%- do run_query('drop table if exists ' ~ changefeed._spark_scd_layers_relation(owner)) -%}
      {%- do run_query('drop table if exists ' ~ changefeed._spark_scd_repeats_relation(owner)) -%}
    {%- endfor -%}
  {%- endif -%}

  {#-- 4. A first write creates the empty state; every write is then the same guarded statement --#}
  {%- if layered -%}
    {#-- the view is gone after a full refresh (step 3) --#}
    {%- do changefeed._spark_scd_layers_create(target, new_rows, columns, rules.key_columns,
        view_exists=(built is not none and not full_refresh)) -%}
  {%- elif not changefeed._spark_table_listed(target) -%}
    {%- if file_format == 'parquet' and (flags.WHICH or '') in ['run', 'build', 'retry'] -%}
      {%- do changefeed._spark_clear_orphan_location(target) -%}
    {%- endif -%}
    {%- do run_query(changefeed._spark_scd_create_sql(materialization, target, file_format, new_rows, columns)) -%}
  {%- endif -%}
  {%- if removed -%}
    {%- do changefeed._spark_scd_point_visible_view(materialization, target, columns) -%}
  {%- endif -%}
  {%- if operations -%}
    {%- set repeats = changefeed._spark_scd2_repeats_table(target, file_format, new_rows, columns, snapshot_reads > 0) -%}
  {%- elif 'changefeed_operation' in columns and events > 0 -%}
    {#-- a current state's rows with their operation, told against the state (which exists now) --#}
    {%- set new_rows = changefeed._spark_scd1_operation_rows(
        new_rows, staged, columns, rules.key_columns, delete_when, target, touched) -%}
  {%- endif -%}

  {#-- 5. Apply the window: parquet adds a layer, or rewrites the touched buckets into new
      directories and switches their partitions; delta/iceberg merge --#}
  {%- if events > 0 and operations -%}
    {%- do changefeed._spark_scd2_operation_apply(target, repeats, file_format, new_rows, columns, rules.key_columns, touched,
        changefeed._spark_scd_key_hashes(staged, rules.key_columns, events, rules.key_filter_limit) if file_format != 'parquet' else none) -%}
  {%- elif events > 0 and layered -%}
    {%- do changefeed._spark_scd_layers_apply(target, columns, rules.key_columns, new_rows, rules.max_layers) -%}
  {%- elif events > 0 and file_format == 'parquet' -%}
    {%- set rewrite = changefeed._spark_scd1_rewrite_sql if materialization == 'changefeed_current_state'
                      else changefeed._spark_scd2_rewrite_sql -%}
    {%- do changefeed._spark_scd_switch_partitions(target, 'changefeed_bucket',
        rewrite(target, new_rows, columns, rules.key_columns, touched), touched) -%}
  {%- elif events > 0 -%}
    {%- set hashes = changefeed._spark_scd_key_hashes(staged, rules.key_columns, events, rules.key_filter_limit) -%}
    {%- if materialization == 'changefeed_current_state' -%}
      {%- call statement('main') -%}{{ changefeed._spark_scd1_merge_sql(target, new_rows, rules.key_columns, touched, hashes) }}{%- endcall -%}
    {%- else -%}
      {%- call statement('main') -%}{{ changefeed._spark_scd2_merge_sql(target, new_rows, columns, rules.key_columns, touched, hashes) }}{%- endcall -%}
    {%- endif -%}
  {%- else -%}
    {%- call statement('main') -%}select 'no new events' as changefeed_status{%- endcall -%}
  {%- endif -%}

  {#-- 6. Commit the cursor last: it may lag behind the state (a re-read), never run ahead --#}
  {%- if events > 0 -%}
    {%- do run_query(changefeed._spark_scd_create_cursor_sql(cursor, file_format)) -%}
    {%- set batch = (committed.batch if committed is not none else 0) + 1 -%}
    {%- do run_query(changefeed._spark_scd_commit_cursor_sql(cursor, file_format, batch, feed_batch, rules.buckets)) -%}
  {%- endif -%}

  {#-- 7. Clean up --#}
  {%- do run_query('uncache table if exists ' ~ staged) -%}
  {%- do run_query('drop view if exists ' ~ staged) -%}
  {{ run_hooks(post_hooks) }}
  {%- do changefeed._spark_claim_give_up() -%}
  {{ return({'relations': [this.incorporate(type='view') if layered or removed else target]}) }}
{% endmacro %}
