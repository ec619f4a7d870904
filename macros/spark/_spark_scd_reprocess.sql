{#-
  Range re-processing of the state consumers (docs/spark.md, "Re-processing a range";
  docs/protocol.md 11.9): `dbt run --vars '{changefeed_reprocess: {from: ..., to: ...}}'`
  rebuilds, with the model's current select, every key that has an event in the range, as
  a full refresh would build it, and leaves the other keys and the cursor alone.

  The window of such a run is every event the state has consumed (feed batches <= P, the
  cursor), so a touched key is recomputed from all of its events, not only those in the
  range: the range picks the keys, the feed gives their whole story. The touched keys are
  those with an event in the range in the select, and those whose held row (current
  state) or a held version (history) lies in the range, so a key the new select drops is
  removed. The apply replaces those keys in one statement (delta/iceberg: one merge) or by
  the bucket switch (parquet, 11.8), and writes no cursor row: a re-run of a killed
  re-processing recomputes the same rows.
-#}

{#- The run's range as {'from': 32 hex digits, 'to': 32 hex digits or none, 'text': what
    the user wrote}, or none without the var. Each bound is a ULID (26 Crockford
    characters, or 32 hex digits) or an ISO-8601 date or time (UTC unless it has an
    offset), which stands for the lowest ULID of its millisecond. `from` is inclusive,
    `to` exclusive (as dbt's --event-time-end); without `to` the range runs to the cursor. -#}
{% macro _spark_scd_reprocess_range(materialization) %}
  {%- set given = var('changefeed_reprocess', none) -%}
  {%- if given is none -%}{{ return(none) }}{%- endif -%}
  {%- set who = "changefeed: model '" ~ model.name ~ "' (materialized='" ~ materialization ~ "')" -%}
  {%- set form = " changefeed_reprocess must be a mapping {from: <bound>, to: <bound>} (to optional),"
      ~ " each bound a ULID (26 characters, or 32 hex digits) or an ISO-8601 date or time such as"
      ~ " 2026-01-31 or 2026-01-31T12:00:00Z; e.g. dbt run -s my_state --vars"
      ~ " '{changefeed_reprocess: {from: \"2026-01-01\", to: \"2026-02-01\"}}'" -%}
  {%- if given is not mapping or 'from' not in given or (given.keys() | list | reject('in', ['from', 'to']) | list) -%}
    {{ exceptions.raise_compiler_error(who ~ ":" ~ form ~ " (got " ~ (given | string) ~ ")") }}
  {%- endif -%}
  {%- set low = changefeed._spark_scd_reprocess_bound(given['from'], 'from', who, form) -%}
  {%- set high = none -%}
  {%- if given.get('to') is not none -%}
    {%- set high = changefeed._spark_scd_reprocess_bound(given['to'], 'to', who, form) -%}
    {%- if high <= low -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": changefeed_reprocess: 'to' (" ~ given['to'] ~ ") must be after 'from' ("
          ~ given['from'] ~ "); 'from' is inclusive, 'to' exclusive") }}
    {%- endif -%}
  {%- endif -%}
  {{ return({'from': low, 'to': high, 'text': '[' ~ given['from'] ~ ', ' ~ (given.get('to') or 'the cursor') ~ ')'}) }}
{% endmacro %}


{#- One bound as 32 upper-case hex digits (see _spark_scd_reprocess_range). -#}
{% macro _spark_scd_reprocess_bound(value, name, who, form) %}
  {%- set text = (value | string) | trim -%}
  {%- set bad = who ~ ": changefeed_reprocess: '" ~ name ~ "' is not a ULID or an ISO-8601 date or time (got "
      ~ (value | string) ~ ");" ~ form -%}
  {%- if value is number or text == '' -%}{{ exceptions.raise_compiler_error(bad) }}{%- endif -%}
  {%- set re = modules.re -%}
  {%- if re.match('^[0-9A-Fa-f]{32}$', text) -%}
    {{ return(text | upper) }}
  {%- endif -%}
  {%- if re.match(changefeed._ulid_regex() | trim, text) -%}
    {#-- canonical (the regex), so ulid_from_string cannot give null --#}
    {%- set sql = "select hex(" ~ changefeed.ulid_from_string("'" ~ text ~ "'") ~ ")" -%}
    {{ return(run_query(sql).rows[0][0] | string | upper) }}
  {%- endif -%}
  {%- set found = re.match('^(\\d{4})-(\\d{2})-(\\d{2})(?:[T ](\\d{2}):(\\d{2})(?::(\\d{2})(?:\\.(\\d{1,6}))?)?)?(Z|[+-]\\d{2}:\\d{2})?$', text) -%}
  {%- if not found -%}{{ exceptions.raise_compiler_error(bad) }}{%- endif -%}
  {%- set parts = found.groups() -%}
  {%- set year, month, day = parts[0] | int, parts[1] | int, parts[2] | int -%}
  {%- set hour, minute, second = (parts[3] or 0) | int, (parts[4] or 0) | int, (parts[5] or 0) | int -%}
  {%- set days_in = [31, 29 if (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)) else 28,
                     31, 30, 31, 30, 31, 31, 30, 31, 30, 31] -%}
  {%- if year < 1970 or month < 1 or month > 12 or day < 1 or day > days_in[month - 1]
        or hour > 23 or minute > 59 or second > 59 -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": changefeed_reprocess: '" ~ name ~ "' is not a valid date or time from 1970 on (got "
        ~ text ~ "); ULID times start at 1970-01-01T00:00:00Z") }}
  {%- endif -%}
  {%- set dt = modules.datetime -%}
  {%- set micros = ((parts[6] or '') ~ '000000')[:6] | int -%}
  {%- set offset = dt.timedelta(0) -%}
  {%- if parts[7] and parts[7] != 'Z' -%}
    {%- set sign = -1 if parts[7][0] == '-' else 1 -%}
    {%- set offset = dt.timedelta(minutes=sign * ((parts[7][1:3] | int) * 60 + (parts[7][4:6] | int))) -%}
  {%- endif -%}
  {%- set moment = dt.datetime(year, month, day, hour, minute, second, micros) - offset -%}
  {%- set millis = (moment - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1) -%}
  {%- if millis < 0 or millis >= 2 ** 48 -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": changefeed_reprocess: '" ~ name ~ "' lies outside the ULID time range (got " ~ text ~ ")") }}
  {%- endif -%}
  {{ return('%012X' | format(millis) ~ '0' * 20) }}
{% endmacro %}


{#- `<alias>.ulid` in the range, as SQL (binary order is ULID order). -#}
{% macro _spark_scd_in_range(range, alias) %}
  {%- set sql = alias ~ ".ulid >= X'" ~ range['from'] ~ "'" -%}
  {%- if range['to'] is not none -%}
    {%- set sql = sql ~ " and " ~ alias ~ ".ulid < X'" ~ range['to'] ~ "'" -%}
  {%- endif -%}
  {{ return('(' ~ sql ~ ')') }}
{% endmacro %}


{#- The keys to rebuild: with an event in the range in the select (`staged`), or with a held
    row in the range (so a key the select now drops is removed). -#}
{% macro _spark_scd_reprocess_keys_sql(target, staged, keys, range) %}
  {%- set listed = changefeed._spark_scd_list(keys) -%}
  {%- set sql -%}
select distinct {{ listed }} from {{ staged }} as changefeed_e where {{ changefeed._spark_scd_in_range(range, 'changefeed_e') }}
union
select distinct {{ listed }} from {{ target }} as changefeed_s where {{ changefeed._spark_scd_in_range(range, 'changefeed_s') }}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The rebuilt rows of the touched keys: current state, per key the newest event; history,
    every version with valid_to recomputed. `events` holds the touched keys' events only. -#}
{% macro _spark_scd_rebuilt_sql(materialization, new_rows, columns, keys) %}
  {%- if materialization == 'changefeed_current_state' -%}
    {{ return(new_rows) }}
  {%- endif -%}
  {%- set nothing = 'select * from (' ~ new_rows ~ ') as changefeed_none where false' -%}
  {{ return(changefeed._spark_scd2_versions_sql(nothing, new_rows, columns, keys)) }}
{% endmacro %}


{#- parquet: the touched buckets (none: the whole state, for the layers layout), with the
    touched keys' rows replaced by the rebuilt ones. -#}
{% macro _spark_scd_reprocess_rewrite_sql(target, rebuilt, touched_keys, state_columns, keys, touched) %}
  {%- set state = changefeed._spark_scd_list(state_columns) -%}
  {%- set sql -%}
select {{ state }} from {{ target }} as changefeed_s
left anti join {{ touched_keys }} as changefeed_k
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_s', 'changefeed_k') }}
{%- if touched is not none %}
where changefeed_s.changefeed_bucket in ({{ touched | join(', ') }})
{%- endif %}
union all
select {{ state }} from ({{ rebuilt }}) as changefeed_rebuilt
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- delta/iceberg: one merge. The source is the rebuilt rows, plus a delete marker for each
    held row of a touched key that the rebuild does not have (matched on the key, and on
    ulid and shard_id for history, whose rows are versions). -#}
{% macro _spark_scd_reprocess_merge_sql(materialization, target, rebuilt, touched_keys, state_columns, keys, touched) %}
  {%- set grain = keys if materialization == 'changefeed_current_state' else keys + ['ulid', 'shard_id'] -%}
  {%- set state = changefeed._spark_scd_list(state_columns) -%}
  {%- set assignments = [] -%}
  {%- set values = [] -%}
  {%- for column in state_columns -%}
    {%- do assignments.append('changefeed_state.' ~ adapter.quote(column) ~ ' = changefeed_source.' ~ adapter.quote(column)) -%}
    {%- do values.append('changefeed_source.' ~ adapter.quote(column)) -%}
  {%- endfor -%}
  {%- set sql -%}
merge into {{ target }} as changefeed_state
using (
    select {{ state }}, false as changefeed_gone from ({{ rebuilt }}) as changefeed_rebuilt
    union all
    select {{ changefeed._spark_scd_list(state_columns, 'changefeed_held') }}, true as changefeed_gone
    from {{ target }} as changefeed_held
    left semi join {{ touched_keys }} as changefeed_k
        on {{ changefeed._spark_scd_key_match(keys, 'changefeed_held', 'changefeed_k') }}
    left anti join ({{ rebuilt }}) as changefeed_kept
        on {{ changefeed._spark_scd_key_match(grain, 'changefeed_held', 'changefeed_kept') }}
    where changefeed_held.changefeed_bucket in ({{ touched | join(', ') }})
) as changefeed_source
on {{ changefeed._spark_scd_key_match(grain, 'changefeed_state', 'changefeed_source') }}
    and changefeed_state.changefeed_bucket = changefeed_source.changefeed_bucket
    and changefeed_state.changefeed_bucket in ({{ touched | join(', ') }})
when matched and changefeed_source.changefeed_gone then delete
when matched then update set {{ assignments | join(', ') }}
when not matched and not changefeed_source.changefeed_gone then insert ({{ state }}) values ({{ values | join(', ') }})
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- feed_events under changefeed_reprocess: only a state consumer reading into its own
    state (feed_events(feed, this)) can be re-processed. -#}
{% macro _spark_scd_check_reprocessable(output) %}
  {%- if output is none or not changefeed._spark_scd_is_own_state(output) -%}
    {%- do changefeed._spark_scd_refuse_reprocess() -%}
  {%- endif -%}
{% endmacro %}


{#- feed_safe_point and feed_cursor under changefeed_reprocess: a model that is not a state
    consumer (an append or merge consumer, which reads the feed with them) would consume
    the feed on from its cursor as usual, in a run its user meant as a rebuild of a range. -#}
{% macro _spark_scd_check_reprocess_selection() %}
  {%- if var('changefeed_reprocess', none) is not none and model is defined
        and config.get('materialized') not in ['changefeed_current_state', 'changefeed_history'] -%}
    {%- do changefeed._spark_scd_refuse_reprocess() -%}
  {%- endif -%}
{% endmacro %}


{% macro _spark_scd_refuse_reprocess() %}
  {{ exceptions.raise_compiler_error(
      "changefeed: model '" ~ model.name ~ "' cannot be re-processed: changefeed_reprocess rebuilds"
      ~ " the state of changefeed_current_state and changefeed_history models that read"
      ~ " feed_events(feed, this). Select only those models (dbt run -s <state models> --vars"
      ~ " '{changefeed_reprocess: ...}'), or rebuild this one with dbt run --full-refresh -s "
      ~ model.name) }}
{% endmacro %}


{#- The window of a re-processing run: every feed batch the state has consumed (<= P). -#}
{% macro _spark_scd_reprocess_window(output, alias) %}
  {%- if should_full_refresh() -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "': --full-refresh rebuilds every key and"
        ~ " changefeed_reprocess a range of them; use one of the two") }}
  {%- endif -%}
  {%- set consumed = changefeed._spark_scd_consumed_batch(output) -%}
  {%- if consumed == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' has consumed nothing yet, so there is nothing to"
        ~ " re-process: run it once without changefeed_reprocess") }}
  {%- endif -%}
  {{ return('(' ~ alias ~ '.changefeed_batch <= ' ~ consumed ~ ')') }}
{% endmacro %}


{#- The apply of a re-processing run (the orchestration's step 5 in its place; no cursor row
    follows it). `staged` is the model's select over every consumed event. -#}
{% macro _spark_scd_reprocess_apply(materialization, rules, target, staged, columns, delete_when, range) %}
  {%- set keys = rules.key_columns -%}
  {%- set touched_keys = (this.identifier ~ '__changefeed_touched') | lower -%}
  {%- set rebuild = (this.identifier ~ '__changefeed_rebuild') | lower -%}
  {%- do run_query('create or replace temporary view ' ~ touched_keys ~ ' as '
      ~ changefeed._spark_scd_reprocess_keys_sql(target, staged, keys, range)) -%}
  {%- do run_query('cache table ' ~ touched_keys) -%}
  {%- set found = run_query(
      "select count(*), concat_ws(',', array_sort(collect_set(" ~ changefeed._spark_scd_bucket(keys, rules.buckets)
      ~ "))) from " ~ touched_keys).rows[0] -%}
  {%- set touched = (found[1] | string).split(',') if found[0] | int > 0 else [] -%}

  {#-- a touched key whose held row's event is below the feed's retention horizon cannot be rebuilt --#}
  {%- set feed = changefeed._spark_feed_of_model() -%}
  {%- set horizon = (changefeed._spark_batch_range(feed)[0] - 1) if feed is not none else 0 -%}
  {%- if touched and horizon > 0 -%}
    {%- set lost = run_query('select count(*) from ' ~ target ~ ' as changefeed_s left semi join '
        ~ touched_keys ~ ' as changefeed_k on ' ~ changefeed._spark_scd_key_match(keys, 'changefeed_s', 'changefeed_k')
        ~ ' where changefeed_s.changefeed_feed_batch <= ' ~ horizon).rows[0][0] | int -%}
    {%- if lost > 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: model '" ~ model.name ~ "': re-processing " ~ range['text'] ~ " would rebuild "
          ~ lost ~ " held row(s) from events that retention removed from " ~ feed ~ " (feed batches up to "
          ~ horizon ~ "), so it would lose them; choose a range of events above the horizon, or rebuild"
          ~ " everything with dbt run --full-refresh (which also starts at the oldest kept batch)") }}
    {%- endif -%}
  {%- endif -%}

  {%- if not touched -%}
    {%- call statement('main') -%}select 'nothing to re-process in {{ range.text }}' as changefeed_status{%- endcall -%}
  {%- else -%}
    {%- do run_query('create or replace temporary view ' ~ rebuild ~ ' as select changefeed_e.* from '
        ~ staged ~ ' as changefeed_e left semi join ' ~ touched_keys ~ ' as changefeed_k on '
        ~ changefeed._spark_scd_key_match(keys, 'changefeed_e', 'changefeed_k')) -%}
    {%- do run_query('cache table ' ~ rebuild) -%}
    {%- set new_rows = changefeed._spark_scd_new_rows(
        materialization, rebuild, columns, keys, delete_when, rules.buckets, rules.versions) -%}
    {%- set rebuilt = changefeed._spark_scd_rebuilt_sql(materialization, new_rows, columns, keys) -%}
    {%- set state_columns = columns + changefeed._spark_scd_added_columns(materialization) -%}
    {#-- a history with the operation: the state gets the versions, then the repeats table
        the repeated snapshot reads (_spark_scd_operation.sql; both rebuilt from events) --#}
    {%- set repeats = none -%}
    {%- if materialization == 'changefeed_current_state' and 'changefeed_operation' in columns -%}
      {#-- every event of the touched keys is in the rebuild: no state row is needed --#}
      {%- set rebuilt = changefeed._spark_scd1_operation_rows(rebuilt, rebuild, columns, keys, delete_when, none, none) -%}
    {%- elif materialization == 'changefeed_history' and 'changefeed_operation' in columns -%}
      {%- set repeated = 'select * from (' ~ rebuilt ~ ') as changefeed_rebuilt where changefeed_repeat' -%}
      {%- set rebuilt = 'select * from (' ~ rebuilt ~ ') as changefeed_rebuilt where not changefeed_repeat' -%}
      {%- set repeats = changefeed._spark_scd2_repeats_table(target, rules.file_format, new_rows, columns,
          run_query("select count_if(changefeed_operation = 'snapshot') from " ~ rebuild).rows[0][0] | int > 0) -%}
    {%- endif -%}
    {%- if rules.layout == 'layers' -%}
      {%- do changefeed._spark_scd_layers_apply(target, columns, keys, new_rows, rules.max_layers,
          replaced=changefeed._spark_scd_reprocess_rewrite_sql(
              target, rebuilt, touched_keys, state_columns, keys, none)) -%}
    {%- elif rules.file_format == 'parquet' -%}
      {%- do changefeed._spark_scd_switch_partitions(target, 'changefeed_bucket', changefeed._spark_scd_reprocess_rewrite_sql(
          target, rebuilt, touched_keys, state_columns, keys, touched), touched) -%}
    {%- else -%}
      {%- call statement('main') -%}
        {{ changefeed._spark_scd_reprocess_merge_sql(materialization, target, rebuilt, touched_keys, state_columns, keys, touched) }}
      {%- endcall -%}
    {%- endif -%}
    {%- if repeats is not none and rules.file_format == 'parquet' -%}
      {%- do changefeed._spark_scd_switch_partitions(repeats, 'changefeed_bucket', changefeed._spark_scd_reprocess_rewrite_sql(
          repeats, repeated, touched_keys, state_columns, keys, touched), touched) -%}
    {%- elif repeats is not none -%}
      {%- do run_query(changefeed._spark_scd_reprocess_merge_sql(materialization, repeats, repeated, touched_keys, state_columns, keys, touched)) -%}
    {%- endif -%}
    {%- do run_query('uncache table if exists ' ~ rebuild) -%}
    {%- do run_query('drop view if exists ' ~ rebuild) -%}
  {%- endif -%}
  {%- do run_query('uncache table if exists ' ~ touched_keys) -%}
  {%- do run_query('drop view if exists ' ~ touched_keys) -%}
{% endmacro %}
