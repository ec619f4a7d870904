{#-
  The SQL of the state consumers (docs/protocol.md 11.8). Every statement is a guarded
  merge: an event changes a key's state only if it is newer, in (ulid, shard_id) order,
  than what the state holds, so applying a window twice, or a window that overlaps an
  applied one, gives the same state (idempotent and monotone). The orchestration is in
  _spark_scd_materialize.sql.

  Arguments shared by these macros:
    target    the state table (this)
    staged    the cached view of the run's events (the model's select)
    columns   the select's column names, in its order
    keys      the unique_key columns
    touched   the buckets (changefeed_bucket values) the run's events fall in, a list of ints
-#}

{#- Tie-free event order: ULIDs are unique within a shard, the shard breaks a cross-shard tie. -#}
{% macro _spark_scd_newer(new, old) %}
  {{ return('(' ~ new ~ '.ulid > ' ~ old ~ '.ulid or (' ~ new ~ '.ulid = ' ~ old ~ '.ulid and '
            ~ new ~ '.shard_id > ' ~ old ~ '.shard_id))') }}
{% endmacro %}


{% macro _spark_scd_key_match(keys, left, right) %}
  {%- set parts = [] -%}
  {%- for key in keys -%}
    {%- do parts.append(left ~ '.' ~ adapter.quote(key) ~ ' <=> ' ~ right ~ '.' ~ adapter.quote(key)) -%}
  {%- endfor -%}
  {{ return(parts | join(' and ')) }}
{% endmacro %}


{% macro _spark_scd_list(names, alias=none) %}
  {%- set parts = [] -%}
  {%- for name in names -%}
    {%- do parts.append((alias ~ '.' if alias else '') ~ adapter.quote(name)) -%}
  {%- endfor -%}
  {{ return(parts | join(', ')) }}
{% endmacro %}


{#- The bucket of a key: a stable hash of the key columns, so a key never changes bucket
    while `buckets` stays the same (the cursor table records it, 11.8). -#}
{% macro _spark_scd_bucket(keys, buckets) %}
  {{ return('cast(pmod(xxhash64(' ~ changefeed._spark_scd_list(keys) ~ '), ' ~ buckets ~ ') as int)') }}
{% endmacro %}


{#- The run's new rows: per key (current state) or per key and feed batch (history) the
    newest event, with changefeed_deleted, valid_from (history) and changefeed_bucket. A
    landed feed's payload is the row as of the landing, so the events of one key in one
    feed batch carry one row image: they are one version. With versions='event' (a feed
    with row images: each event carries the row as of its write) every event is one. -#}
{% macro _spark_scd_new_rows(materialization, staged, columns, keys, delete_when, buckets, versions='batch') %}
  {%- if materialization != 'changefeed_history' -%}
    {%- set grain = keys -%}
  {%- elif versions == 'event' -%}
    {%- set grain = keys + ['ulid', 'shard_id'] -%}
  {%- else -%}
    {%- set grain = keys + ['changefeed_feed_batch'] -%}
  {%- endif -%}
  {%- set sql -%}
select {{ changefeed._spark_scd_list(columns) }},
    coalesce({{ delete_when if delete_when else 'false' }}, false) as changefeed_deleted,
    {%- if materialization == 'changefeed_history' %}
    {{ changefeed.ulid_timestamp('ulid') }} as valid_from,
    {%- endif %}
    {{ changefeed._spark_scd_bucket(keys, buckets) }} as changefeed_bucket
from (
    select *, row_number() over (
        partition by {{ changefeed._spark_scd_list(grain) }} order by ulid desc, shard_id desc) as changefeed_rank
    from {{ staged }}
) as changefeed_ranked
where changefeed_rank = 1
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- Current state, parquet: the touched buckets (none: every row, a layers compaction)
    rewritten with, per key, the newest of the rows they hold and the new rows (written by
    _spark_scd_switch_partitions). -#}
{% macro _spark_scd1_rewrite_sql(target, new_rows, columns, keys, touched) %}
  {%- set state = changefeed._spark_scd_list(columns + ['changefeed_deleted', 'changefeed_bucket']) -%}
  {%- set sql -%}
select {{ state }}
from (
    select *, row_number() over (
        partition by {{ changefeed._spark_scd_list(keys) }} order by ulid desc, shard_id desc) as changefeed_rank
    from (
        select {{ state }} from {{ target }}
        {%- if touched is not none %} where changefeed_bucket in ({{ touched | join(', ') }}){% endif %}
        union all
        select {{ state }} from ({{ new_rows }}) as changefeed_new
    ) as changefeed_both
) as changefeed_ranked
where changefeed_rank = 1
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The state's rows a run's keys can match, as a condition on the state alone: the
    touched buckets, and with `hashes` (the xxhash64 of each of the run's keys, see
    _spark_scd_key_hashes) the rows whose key hashes to one of them. Implied by the key
    match, so it changes no result; being on the state alone, Spark applies it to the
    state's scan, before the MERGE's outer join, which then joins the run's rows with
    about as many of the state's instead of shuffling the whole state. -#}
{% macro _spark_scd_state_filter(keys, touched, hashes) %}
  {%- set sql -%}
changefeed_state.changefeed_bucket in ({{ touched | join(', ') }})
    {%- if hashes is not none %}
    and xxhash64({{ changefeed._spark_scd_list(keys, 'changefeed_state') }}) in ({{ hashes | join(', ') }})
    {%- endif -%}
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The xxhash64 of every key of the staged window (as the state filter above compares
    them), or none for a window of more than `limit` events (the model's key_filter_limit):
    the list is part of the statement's text (about 20 characters a key, 2 MB at the
    default 100,000), and a window that large is a sizeable share of most states anyway. -#}
{% macro _spark_scd_key_hashes(staged, keys, events, limit) %}
  {%- if events > limit -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set listed = run_query("select concat_ws(',', array_sort(collect_set(cast(xxhash64("
      ~ changefeed._spark_scd_list(keys) ~ ") as string)))) from " ~ staged).rows[0][0] -%}
  {{ return((listed | string).split(',') if listed else []) }}
{% endmacro %}


{#- Current state, delta/iceberg: one MERGE, guarded by the event order. The state filter
    lets the table format skip the files of untouched buckets and Spark the rows of
    untouched keys. -#}
{% macro _spark_scd1_merge_sql(target, new_rows, keys, touched, hashes=none) %}
  {%- set sql -%}
merge into {{ target }} as changefeed_state
using ({{ new_rows }}) as changefeed_new
on {{ changefeed._spark_scd_key_match(keys, 'changefeed_state', 'changefeed_new') }}
    and changefeed_state.changefeed_bucket = changefeed_new.changefeed_bucket
    and {{ changefeed._spark_scd_state_filter(keys, touched, hashes) }}
when matched and {{ changefeed._spark_scd_newer('changefeed_new', 'changefeed_state') }} then update set *
when not matched then insert *
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- History: the versions of the keys a run touches, old and new, each event once (an event
    re-read after a kill is the version the state already holds), and valid_to = the next
    version's valid_from in (ulid, shard_id) order. `held` selects the versions the state
    holds. -#}
{% macro _spark_scd2_versions_sql(held, new_rows, columns, keys) %}
  {%- if 'changefeed_operation' in columns -%}
    {{ return(changefeed._spark_scd2_operation_versions_sql(held, new_rows, columns, keys)) }}
  {%- endif -%}
  {%- set sql -%}
select {{ changefeed._spark_scd_list(columns + ['changefeed_deleted', 'valid_from']) }},
    lead(valid_from) over (
        partition by {{ changefeed._spark_scd_list(keys) }} order by ulid, shard_id) as valid_to,
    changefeed_bucket
from (
    {{ changefeed._spark_scd2_unique_sql(held, new_rows, columns, keys) }}
) as changefeed_unique
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The held versions and the new ones, each event once (an event re-read after a kill is
    the version the state already holds). -#}
{% macro _spark_scd2_unique_sql(held, new_rows, columns, keys) %}
  {%- set version = changefeed._spark_scd_list(columns + ['changefeed_deleted', 'valid_from', 'changefeed_bucket']) -%}
  {%- set sql -%}
select * from (
    select *, row_number() over (
        partition by {{ changefeed._spark_scd_list(keys) }}, ulid, shard_id
        order by changefeed_held desc) as changefeed_copy
    from (
        select {{ version }}, 1 as changefeed_held from ({{ held }}) as changefeed_old
        union all
        select {{ version }}, 0 as changefeed_held from ({{ new_rows }}) as changefeed_new
    ) as changefeed_both
) as changefeed_copies
where changefeed_copy = 1
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- A history's merge condition: the same version, by key, event and bucket. -#}
{% macro _spark_scd2_version_match(keys, state, version) %}
  {%- set parts = [changefeed._spark_scd_key_match(keys, state, version)] -%}
  {%- for column in ['ulid', 'shard_id', 'changefeed_bucket'] -%}
    {%- do parts.append(state ~ '.' ~ column ~ ' = ' ~ version ~ '.' ~ column) -%}
  {%- endfor -%}
  {{ return(parts | join('\n    and ')) }}
{% endmacro %}


{#- History, parquet: the touched buckets with their versions recomputed (written by
    _spark_scd_switch_partitions). -#}
{% macro _spark_scd2_rewrite_sql(target, new_rows, columns, keys, touched) %}
  {%- set held = 'select * from ' ~ target ~ ' where changefeed_bucket in (' ~ touched | join(', ') ~ ')' -%}
  {{ return(changefeed._spark_scd2_versions_sql(held, new_rows, columns, keys)) }}
{% endmacro %}


{#- History, delta/iceberg: one MERGE on (key, ulid, shard_id) that inserts the new versions
    and moves the valid_to of the versions a late event now follows. -#}
{% macro _spark_scd2_merge_sql(target, new_rows, columns, keys, touched, hashes=none) %}
  {%- set held -%}
select changefeed_old.* from {{ target }} as changefeed_old
left semi join ({{ new_rows }}) as changefeed_new
    on {{ changefeed._spark_scd_key_match(keys, 'changefeed_old', 'changefeed_new') }}
where changefeed_old.changefeed_bucket in ({{ touched | join(', ') }})
  {%- endset -%}
  {%- set sql -%}
merge into {{ target }} as changefeed_state
using ({{ changefeed._spark_scd2_versions_sql(held, new_rows, columns, keys) }}) as changefeed_version
on {{ changefeed._spark_scd2_version_match(keys, 'changefeed_state', 'changefeed_version') }}
    and {{ changefeed._spark_scd_state_filter(keys, touched, hashes) }}
when matched and not (changefeed_state.valid_to <=> changefeed_version.valid_to)
    then update set changefeed_state.valid_to = changefeed_version.valid_to
when not matched then insert *
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The state's empty table, created before the first write so that every write is the
    same guarded statement (a first run killed after this is an empty state at cursor 0).
    Delta and Iceberg tables mark a merged key's old row deleted (deletion vectors; Iceberg's
    merge-on-read position deletes) instead of rewriting its data file: with new events
    spread over the key space every file holds a changed key, and copy-on-write would
    rewrite the whole state on every run. -#}
{% macro _spark_scd_create_sql(materialization, target, file_format, new_rows, columns) %}
  {%- set sql -%}
create table {{ target }}
using {{ file_format }}
partitioned by (changefeed_bucket)
{%- if file_format == 'delta' %}
tblproperties ('delta.enableDeletionVectors' = 'true')
{%- elif file_format == 'iceberg' %}
tblproperties ('format-version' = '2', 'write.merge.mode' = 'merge-on-read',
    'write.update.mode' = 'merge-on-read', 'write.delete.mode' = 'merge-on-read')
{%- endif %}
as select {{ changefeed._spark_scd_list(columns + ['changefeed_deleted']) }},
    {%- if materialization == 'changefeed_history' %}
    valid_from, cast(null as timestamp) as valid_to,
    {%- endif %}
    changefeed_bucket
from ({{ new_rows }}) as changefeed_new
where false
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
