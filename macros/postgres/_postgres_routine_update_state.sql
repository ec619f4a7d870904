{#- update_state:<feed>() : protocol 4.4. Called inside the writer's transaction, in the same
    round trip as its COMMIT: mark the session committed (fails if it was tombstoned or
    reaped), compare-and-set the state row (fails if the lock was burned or the state
    moved), advance the sequence, release the lock and clear the write. Everything but the
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
  v_session record;
  v_now record;
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
     and se.write_id = cf.v_write_id and se.state = 0
  returning se.generation, se.time_ms, se.ulid_high, se.block_start,
            se.expected_time_ms, se.expected_high, se.expected_low into v_session;
  if not found then
    raise exception using errcode = 'CF001',
      message = 'changefeed: write ' || v_write_id::text || ' on ' || {{ ctx['lit_feed'] }} || ' shard '
        || v_shard::text || ' was abandoned (tombstoned by a reader or reaped after a stall); roll back and retry',
      hint = 'ROLLBACK, call release(), and run the transaction again.';
  end if;

  update {{ q['state'] }} as st
     set time_ms = cf.v_session.time_ms, ulid_high = cf.v_session.ulid_high,
         ulid_low = cf.v_session.block_start + {{ ctx['block'] }}
   where st.shard_id = cf.v_shard and st.generation = cf.v_session.generation
     and st.time_ms = cf.v_session.expected_time_ms and st.ulid_high = cf.v_session.expected_high
     and st.ulid_low = cf.v_session.expected_low;
  if not found then
    select st.generation, st.time_ms, st.ulid_low into v_now
      from {{ q['state'] }} as st where st.shard_id = cf.v_shard;
    if v_now.generation is distinct from v_session.generation then
      raise exception using errcode = 'CF002',
        message = 'changefeed: the lock of ' || {{ ctx['lit_feed'] }} || ' shard ' || v_shard::text
          || ' was burned after a stall (generation ' || v_session.generation::text || ' -> '
          || coalesce(v_now.generation::text, 'none') || '); this transaction must roll back',
        hint = 'ROLLBACK, call release(), and run the transaction again.';
    end if;
    raise exception using errcode = 'CF002',
      message = 'changefeed: the state of ' || {{ ctx['lit_feed'] }} || ' shard ' || v_shard::text
        || ' moved while write ' || v_write_id::text || ' held its lock; this transaction must roll back',
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
