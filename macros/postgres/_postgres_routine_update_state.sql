{#- update_state:<feed>() : protocol 4.4. Called inside the writer's transaction, in the same
    round trip as its COMMIT: mark the session committed, compare-and-set on its pending
    state (fails if it was burned, tombstoned or reaped), advance the sequence, release the
    lock and clear the write. The state row is not touched: the lock call allocated the
    block, so writers of a shard never wait for each other's COMMIT. Everything but the
    lock release is transactional, so a failed COMMIT undoes it and the next lock holder
    reaps the pending session. -#}
{% macro _postgres_routine_update_state(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_parts text[] := pg_catalog.string_to_array(pg_catalog.current_setting({{ ctx['lit_guc'] }}, true), ' ');
  v_write_id bigint;
  v_shard integer;
  v_generation bigint;
  v_now_generation bigint;
begin
  if v_parts[6] is null then
    raise exception using errcode = 'CF004',
      message = 'changefeed: no write is in progress on this connection for feed ' || {{ ctx['lit_feed'] }},
      hint = 'Call the procedure ' || {{ changefeed._postgres_literal(q['lock']) }} || ' before the transaction, then update_state() just before COMMIT.';
  end if;
  v_write_id := v_parts[4]::bigint;
  v_shard := v_parts[5]::integer;
  v_generation := v_parts[6]::bigint;

  update {{ q['session'] }} as se set state = 1, finished_at = pg_catalog.clock_timestamp()
   where se.shard_id = cf.v_shard and se.session_id = pg_catalog.pg_backend_pid()
     and se.write_id = cf.v_write_id and se.state = 0;
  if not found then
    -- Abandoned: burned after a stall (the generation moved on), tombstoned, or reaped.
    select st.generation into v_now_generation from {{ q['state'] }} as st where st.shard_id = cf.v_shard;
    raise exception using errcode = 'CF001',
      message = 'changefeed: write ' || v_write_id::text || ' on ' || {{ ctx['lit_feed'] }} || ' shard '
        || v_shard::text || ' was abandoned ('
        || case when v_now_generation is distinct from v_generation
                then 'its lock was burned after a stall or it was tombstoned: generation '
                     || v_generation::text || ' -> ' || coalesce(v_now_generation::text, 'none')
                else 'reaped by the next lock holder, or tombstoned by a reader' end
        || '); roll back and retry',
      hint = 'ROLLBACK, call release(), and run the transaction again.';
  end if;

  perform pg_catalog.nextval({{ ctx['lit_sequence'] }}::pg_catalog.regclass);
  perform pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended(
    {{ ctx['lit_lock_prefix'] }} || v_shard::text || '/' || v_generation::text, 0));
  perform pg_catalog.set_config({{ ctx['lit_guc'] }}, '', false);
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['update_state'] ~ '()
returns void
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
