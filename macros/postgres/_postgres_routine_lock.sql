{#- lock:<feed>(shard_id, time_hint) -> (write_id, ulid_high, ulid_low): protocol 4.1-4.3.
    A procedure that must run outside a transaction block: it commits, so that the
    pending session is visible before the application's transaction starts.
    PostgreSQL forbids COMMIT in SECURITY DEFINER procedures and in procedures with a SET
    clause, so this one runs with the caller's rights, qualifies every name, and does the
    privileged work in lock_wait:<feed> (SECURITY DEFINER). -#}
{% macro _postgres_routine_lock(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
declare
  v_probe text;
  v_reference text;
  v_row record;
begin
  -- CF005: COMMIT inside an exception block always fails, with one message inside a
  -- transaction block (atomic context) and another outside. lock_try(null, ...) commits
  -- inside a function, which is always atomic: its message is the reference.
  begin
    commit;
  exception when invalid_transaction_termination then
    get stacked diagnostics v_probe = message_text;
  end;
  if v_probe is distinct from 'cannot commit while a subtransaction is active' then
    begin
      perform {{ q['lock_try'] }}(null, null);
    exception when invalid_transaction_termination then
      get stacked diagnostics v_reference = message_text;
    end;
    if v_probe is not distinct from v_reference then
      raise exception using
        errcode = 'CF005',
        message = 'changefeed: lock on feed ' || {{ ctx['lit_feed'] }}
          || ' was called inside a transaction block; it must run outside one (autocommit), because it commits',
        hint = 'Call it before BEGIN; then run your transaction and finish it with update_state() and COMMIT in one round trip.';
    end if;
  end if;
  commit;
  set transaction isolation level read committed;
  -- The lock's own commit need not wait for its WAL flush: it is visible at once, and the
  -- application's COMMIT later flushes it along with the data. This keeps a WAL flush out
  -- of the time the shard's lock is held.
  perform pg_catalog.set_config('synchronous_commit', 'off', true);
  select w.o_write_id, w.o_ulid_high, w.o_ulid_low into v_row
    from {{ q['lock_wait'] }}(p_shard_id, p_time_hint) as w;
  write_id := v_row.o_write_id;
  ulid_high := v_row.o_ulid_high;
  ulid_low := v_row.o_ulid_low;
  commit;
end
  {%- endset -%}
  {{ return('create or replace procedure ' ~ q['lock'] ~ '(
  p_shard_id integer,
  p_time_hint timestamptz default null,
  inout write_id bigint default null,
  inout ulid_high bytea default null,
  inout ulid_low bigint default null)
language plpgsql
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
