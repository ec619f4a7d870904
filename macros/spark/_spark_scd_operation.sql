{#-
  A history whose select has changefeed_operation (docs/spark.md, "The operation column";
  docs/protocol.md 11.8). Two things follow from the versions a key has, so both are
  recomputed whenever a touched key's versions are, and a late version changes them too:

  * each version's operation: `delete` for a delete version, `snapshot` for a row a
    snapshot read, else `insert` after no version or a delete and `update` after a live one;
  * repeats: a snapshot's read of a key whose version before it is live and has the same
    columns (the event's shard_id, ulid, changefeed_feed_batch and operation aside) is not
    a version of the model. It is kept aside, in the state's helper table
    <state>__changefeed_repeats (the state's columns, partitioned as the state), not
    dropped: a late version that comes in between makes it a version again (the row did
    change back), and one that makes a kept read repeat its new predecessor moves it there.

  The repeats table exists once a window held a snapshot's read. While it does, a run
  writes it before and after the state (R1-R3 below), so that a run killed at any point
  leaves every version in the state or the repeats table, and the re-run, which computes
  the same versions from their union and the same window, ends where the killed run would:
    R1 the repeats table gains the run's repeats (nothing leaves it);
    R2 the state gets the run's versions that are not repeats, and loses those that are;
    R3 the repeats table keeps only the run's repeats (of the touched keys).
  A re-processing run rebuilds both from the feed's events: the state, then the repeats.

  A current state that selects it: _spark_scd1_operation_rows, at the end.
-#}

{% macro _spark_scd_repeats_relation(state) %}
  {{ return(changefeed._spark_scd_helper_relation(state, '__changefeed_repeats')) }}
{% endmacro %}


{#- The columns that say what the row is, not which event carried it. -#}
{% macro _spark_scd2_data_columns(columns) %}
  {{ return(columns | reject('in', ['shard_id', 'ulid', 'changefeed_feed_batch', 'changefeed_operation']) | list) }}
{% endmacro %}


{#- The versions of the keys a run touches (`held`: the versions the state and the repeats
    table hold, by the names of _spark_scd2_versions_sql), each event once, with their
    operation, valid_to = the next version's valid_from among those that are not repeats
    (null for a repeat), then changefeed_repeat. -#}
{% macro _spark_scd2_operation_versions_sql(held, new_rows, columns, keys) %}
  {%- set key_list = changefeed._spark_scd_list(keys) -%}
  {%- set before = 'over (partition by ' ~ key_list ~ ' order by ulid, shard_id)' -%}
  {%- set same = ['true'] -%}
  {%- for column in changefeed._spark_scd2_data_columns(columns) -%}
    {%- do same.append(adapter.quote(column) ~ ' <=> lag(' ~ adapter.quote(column) ~ ') ' ~ before) -%}
  {%- endfor -%}
  {%- set shown = [] -%}
  {%- for column in columns -%}
    {%- do shown.append("case when changefeed_deleted then 'delete'"
        ~ " when changefeed_operation = 'snapshot' then 'snapshot'"
        ~ " when coalesce(changefeed_before_deleted, true) then 'insert' else 'update' end as changefeed_operation"
        if column == 'changefeed_operation' else adapter.quote(column)) -%}
  {%- endfor -%}
  {%- set sql -%}
select {{ shown | join(', ') }}, changefeed_deleted, valid_from,
    case when changefeed_repeat then cast(null as timestamp) else lead(valid_from) over (
        partition by {{ key_list }}, changefeed_repeat order by ulid, shard_id) end as valid_to,
    changefeed_bucket, changefeed_repeat
from (
    select *, coalesce(changefeed_operation = 'snapshot' and not changefeed_deleted
        and not changefeed_before_deleted and changefeed_same, false) as changefeed_repeat
    from (
        select *, lag(changefeed_deleted) {{ before }} as changefeed_before_deleted,
            {{ same | join('\n            and ') }} as changefeed_same
        from (
            {{ changefeed._spark_scd2_unique_sql(held, new_rows, columns, keys) }}
        ) as changefeed_unique
    ) as changefeed_before
) as changefeed_flagged
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The rows the state holds of the touched keys (`of`: a select of the run's new rows,
    matched by key; none: every row of the touched buckets), and the repeats table's. -#}
{% macro _spark_scd2_held_sql(target, repeats, columns, keys, touched, of) %}
  {%- set version = columns + ['changefeed_deleted', 'valid_from', 'changefeed_bucket'] -%}
  {%- set parts = [] -%}
  {%- for table in [target] + ([repeats] if repeats is not none else []) -%}
    {%- set part -%}
select {{ changefeed._spark_scd_list(version, 'changefeed_old') }} from {{ table }} as changefeed_old
    {%- if of is not none %}
left semi join ({{ of }}) as changefeed_new
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_old', 'changefeed_new') }}
    {%- endif %}
where changefeed_old.changefeed_bucket in ({{ touched | join(', ') }})
    {%- endset -%}
    {%- do parts.append(part) -%}
  {%- endfor -%}
  {{ return(parts | join('\nunion all\n')) }}
{% endmacro %}


{#- The state's columns of `versions` whose changefeed_repeat is `repeat`. -#}
{% macro _spark_scd2_versions_where(versions, columns, repeat) %}
  {{ return('select ' ~ changefeed._spark_scd_list(columns + changefeed._spark_scd_added_columns('changefeed_history'))
      ~ ' from (' ~ versions ~ ') as changefeed_version where ' ~ ('' if repeat else 'not ') ~ 'changefeed_repeat') }}
{% endmacro %}


{#- R2 on delta/iceberg: one MERGE on (key, ulid, shard_id) that inserts the new versions,
    deletes the versions that are repeats now, and moves valid_to and the operation. -#}
{% macro _spark_scd2_operation_merge_sql(target, versions, columns, keys, touched, hashes) %}
  {%- set state = columns + changefeed._spark_scd_added_columns('changefeed_history') -%}
  {%- set sql -%}
merge into {{ target }} as changefeed_state
using ({{ versions }}) as changefeed_version
on {{ changefeed._spark_scd2_version_match(keys, 'changefeed_state', 'changefeed_version') }}
    and {{ changefeed._spark_scd_state_filter(keys, touched, hashes) }}
when matched and changefeed_version.changefeed_repeat then delete
when matched and not (changefeed_state.valid_to <=> changefeed_version.valid_to
        and changefeed_state.changefeed_operation <=> changefeed_version.changefeed_operation)
    then update set changefeed_state.valid_to = changefeed_version.valid_to,
        changefeed_state.changefeed_operation = changefeed_version.changefeed_operation
when not matched and not changefeed_version.changefeed_repeat
    then insert ({{ changefeed._spark_scd_list(state) }}) values ({{ changefeed._spark_scd_list(state, 'changefeed_version') }})
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- R1 (`step` 'add': insert the repeats it lacks) and R3 ('keep': delete what is no
    repeat any more) on delta/iceberg. -#}
{% macro _spark_scd2_repeats_merge_sql(repeats, versions, columns, keys, touched, step) %}
  {%- set state = columns + changefeed._spark_scd_added_columns('changefeed_history') -%}
  {%- set sql -%}
merge into {{ repeats }} as changefeed_state
using ({{ versions }}) as changefeed_version
on {{ changefeed._spark_scd2_version_match(keys, 'changefeed_state', 'changefeed_version') }}
    and changefeed_state.changefeed_bucket in ({{ touched | join(', ') }})
{%- if step == 'add' %}
when not matched and changefeed_version.changefeed_repeat
    then insert ({{ changefeed._spark_scd_list(state) }}) values ({{ changefeed._spark_scd_list(state, 'changefeed_version') }})
{%- else %}
when matched and not changefeed_version.changefeed_repeat then delete
{%- endif %}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- R1 on parquet: the touched buckets of the repeats table with the run's repeats added,
    each event once (a repeat has no valid_to). -#}
{% macro _spark_scd2_repeats_added_sql(repeats, versions, columns, keys, touched) %}
  {%- set held = 'select * from ' ~ repeats ~ ' where changefeed_bucket in (' ~ touched | join(', ') ~ ')' -%}
  {{ return('select ' ~ changefeed._spark_scd_list(columns + ['changefeed_deleted', 'valid_from'])
      ~ ', cast(null as timestamp) as valid_to, changefeed_bucket from ('
      ~ changefeed._spark_scd2_unique_sql(held, changefeed._spark_scd2_versions_where(versions, columns, true), columns, keys)
      ~ ') as changefeed_repeats') }}
{% endmacro %}


{#- The repeats table of `target`, created empty (as the state) when `needed` and missing;
    none when it neither exists nor is needed. -#}
{% macro _spark_scd2_repeats_table(target, file_format, new_rows, columns, needed) %}
  {%- set repeats = changefeed._spark_scd_repeats_relation(target) -%}
  {%- if changefeed._spark_table_listed(repeats) -%}
    {{ return(repeats) }}
  {%- endif -%}
  {%- if not needed -%}
    {{ return(none) }}
  {%- endif -%}
  {%- if file_format == 'parquet' and (flags.WHICH or '') in ['run', 'build', 'retry'] -%}
    {%- do changefeed._spark_clear_orphan_location(repeats) -%}
  {%- endif -%}
  {%- do run_query(changefeed._spark_scd_create_sql('changefeed_history', repeats, file_format, new_rows, columns)) -%}
  {{ return(repeats) }}
{% endmacro %}


{#- A run's apply (the orchestration's step 5) for such a history: R1, R2, R3. -#}
{% macro _spark_scd2_operation_apply(target, repeats, file_format, new_rows, columns, keys, touched, hashes) %}
  {%- if file_format == 'parquet' -%}
    {%- set versions = changefeed._spark_scd2_operation_versions_sql(
        changefeed._spark_scd2_held_sql(target, repeats, columns, keys, touched, none), new_rows, columns, keys) -%}
    {%- if repeats is not none -%}
      {%- do changefeed._spark_scd_switch_partitions(repeats, 'changefeed_bucket',
          changefeed._spark_scd2_repeats_added_sql(repeats, versions, columns, keys, touched), touched, 'r1') -%}
    {%- endif -%}
    {%- do changefeed._spark_scd_switch_partitions(target, 'changefeed_bucket',
        changefeed._spark_scd2_versions_where(versions, columns, false), touched) -%}
    {%- if repeats is not none -%}
      {%- do changefeed._spark_scd_switch_partitions(repeats, 'changefeed_bucket',
          changefeed._spark_scd2_versions_where(versions, columns, true), touched, 'r3') -%}
    {%- endif -%}
  {%- else -%}
    {%- set versions = changefeed._spark_scd2_operation_versions_sql(
        changefeed._spark_scd2_held_sql(target, repeats, columns, keys, touched, new_rows), new_rows, columns, keys) -%}
    {%- if repeats is not none -%}
      {%- do run_query(changefeed._spark_scd2_repeats_merge_sql(repeats, versions, columns, keys, touched, 'add')) -%}
    {%- endif -%}
    {%- call statement('main') -%}
      {{ changefeed._spark_scd2_operation_merge_sql(target, versions, columns, keys, touched, hashes) }}
    {%- endcall -%}
    {%- if repeats is not none -%}
      {%- do run_query(changefeed._spark_scd2_repeats_merge_sql(repeats, versions, columns, keys, touched, 'keep')) -%}
    {%- endif -%}
  {%- endif -%}
{% endmacro %}


{#- A current state whose select has changefeed_operation: the window's new rows (per key
    its newest event e) with e's operation as a history would give e's version: `delete`,
    `snapshot`, else `insert` or `update` by the key's event before e in another feed
    batch, the newer of the window's (from `events`, the staged select) and the state's
    row (`state`, read for the touched buckets; none when the window holds every event of
    its keys, as a re-processing run's does). A state row that is e itself (a window read
    again after a kill) keeps the operation it was given, so a re-read writes what the
    first read did. -#}
{% macro _spark_scd1_operation_rows(new_rows, events, columns, keys, delete_when, state, touched) %}
  {%- set key_list = changefeed._spark_scd_list(keys) -%}
  {%- set newer = changefeed._spark_scd_newer -%}
  {%- set shown = [] -%}
  {%- for column in columns -%}
    {%- if column == 'changefeed_operation' and state is none -%}
      {%- do shown.append("case when changefeed_n.changefeed_deleted then 'delete'"
          ~ " when changefeed_n.changefeed_operation = 'snapshot' then 'snapshot'"
          ~ " when coalesce(changefeed_p.changefeed_deleted, true) then 'insert' else 'update' end as changefeed_operation") -%}
    {%- elif column == 'changefeed_operation' -%}
      {%- set prior -%}
case when changefeed_h.ulid is null or not {{ newer('changefeed_n', 'changefeed_h') }} then changefeed_p.changefeed_deleted
            when changefeed_p.ulid is null or {{ newer('changefeed_h', 'changefeed_p') }} then changefeed_h.changefeed_deleted
            else changefeed_p.changefeed_deleted end
      {%- endset -%}
      {%- do shown.append("case when changefeed_n.changefeed_deleted then 'delete'"
          ~ " when changefeed_n.changefeed_operation = 'snapshot' then 'snapshot'"
          ~ " when changefeed_h.ulid = changefeed_n.ulid and changefeed_h.shard_id = changefeed_n.shard_id"
          ~ " then changefeed_h.changefeed_operation"
          ~ " when coalesce(" ~ prior ~ ", true) then 'insert' else 'update' end as changefeed_operation") -%}
    {%- else -%}
      {%- do shown.append('changefeed_n.' ~ adapter.quote(column)) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set sql -%}
select {{ shown | join(', ') }}, changefeed_n.changefeed_deleted, changefeed_n.changefeed_bucket
from ({{ new_rows }}) as changefeed_n
left join (
    select * from (
        select {{ key_list }}, ulid, shard_id, coalesce({{ delete_when if delete_when else 'false' }}, false) as changefeed_deleted,
            row_number() over (partition by {{ key_list }} order by ulid desc, shard_id desc) as changefeed_rank
        from (
            select *, first_value(changefeed_feed_batch) over (
                partition by {{ key_list }} order by ulid desc, shard_id desc) as changefeed_top_batch
            from {{ events }}
        ) as changefeed_batches
        where changefeed_feed_batch <> changefeed_top_batch
    ) as changefeed_ranked
    where changefeed_rank = 1
) as changefeed_p
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_n', 'changefeed_p') }}
{%- if state is not none %}
left join (
    select {{ key_list }}, ulid, shard_id, changefeed_deleted, changefeed_operation from {{ state }}
    where changefeed_bucket in ({{ touched | join(', ') }})
) as changefeed_h
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_n', 'changefeed_h') }}
{%- endif %}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
