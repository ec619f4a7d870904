{#-
  The feed's writer and reader roles and their privileges (protocol section 9).
-#}


{#-
  routines_only gives just the execute grants (re-applied after setup or upgrade
  re-creates the routines).
  writer: lock, ulid, update_state, release (and lock's internal lock_wait, lock_try, which
          it calls with the caller's rights); insert into feed (blocking) or into the
          outbox's shard_id, time_hint and key columns (outbox; txid and order_sequence
          always come from their defaults); usage of the sequence. It cannot read the
          feed, outbox, state or sessions, nor change the state.
  reader: select on the feed (and on the retention and consumer tables, granted where
          they are created: retention.sql); read_feed, safe_point, barrier_acquire,
          barrier_check, tombstone, shards, save_cursor, forget_consumer, snapshot_begin,
          snapshot_finish and (outbox) move_outbox; select on snapshot:<feed> (snapshot.sql). No table writes. retain (removing events) is the owner's only.
  Both: usage on the changefeed schema and select on the registry (clients read names).
-#}
{% macro _postgres_grants_statements(ctx, routines_only=false) %}
  {%- set q = ctx['q'] -%}
  {%- set writer = changefeed._postgres_ident(ctx['n']['writer_role']) -%}
  {%- set reader = changefeed._postgres_ident(ctx['n']['reader_role']) -%}
  {%- set statements = [] -%}
  {%- if not routines_only -%}
    {%- for role_name in [ctx['n']['writer_role'], ctx['n']['reader_role']] -%}
      {%- set create_role -%}
do $cfrole$
begin
  if not exists (select 1 from pg_catalog.pg_roles where rolname = {{ changefeed._postgres_literal(role_name) }}) then
    create role {{ changefeed._postgres_ident(role_name) }} nologin;
  end if;
end
$cfrole$
      {%- endset -%}
      {%- do statements.append(create_role) -%}
      {%- do statements.append('grant usage on schema ' ~ ctx['schema'] ~ ' to ' ~ changefeed._postgres_ident(role_name)) -%}
      {%- do statements.append('grant select on ' ~ ctx['schema'] ~ '.feeds to ' ~ changefeed._postgres_ident(role_name)) -%}
    {%- endfor -%}
    {%- do statements.append('grant usage on sequence ' ~ q['sequence'] ~ ' to ' ~ writer) -%}
    {%- if ctx['mode'] == 'outbox' -%}
      {%- do statements.append('grant insert (shard_id, time_hint, ' ~ ctx['key_list']
          ~ (', row_image, row_deleted' if ctx['row_image'] else '') ~ ') on ' ~ q['outbox'] ~ ' to ' ~ writer) -%}
    {%- else -%}
      {%- do statements.append('grant insert on ' ~ q['feed'] ~ ' to ' ~ writer) -%}
    {%- endif -%}
    {%- do statements.append('grant select on ' ~ q['feed'] ~ ' to ' ~ reader) -%}
  {%- endif -%}
  {%- if ctx['mode'] != 'outbox' -%}
    {%- do statements.append('grant execute on procedure ' ~ q['lock'] ~ ' to ' ~ writer) -%}
    {%- for kind in ['lock_wait', 'lock_try', 'ulid', 'update_state', 'release'] -%}
      {%- do statements.append('grant execute on function ' ~ q[kind] ~ ' to ' ~ writer) -%}
    {%- endfor -%}
  {%- else -%}
    {%- do statements.append('grant execute on procedure ' ~ q['move_outbox'] ~ ' to ' ~ reader) -%}
  {%- endif -%}
  {%- for kind in ['read_feed', 'safe_point', 'barrier_acquire', 'barrier_check', 'tombstone', 'shards',
                   'save_cursor', 'forget_consumer', 'snapshot_begin', 'snapshot_finish'] -%}
    {%- do statements.append('grant execute on function ' ~ q[kind] ~ ' to ' ~ reader) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}
