{#- lock_wait:<feed>(shard_id, time_hint) -> (o_write_id, o_ulid_high, o_ulid_low): the
    privileged body of lock: (protocol 4.2 and 4.3), SECURITY DEFINER. Runs in the short
    READ COMMITTED transaction that lock: opens; lock: commits it.

    Acquiring (4.2): a short wait for the lock named by the shard's generation, a progress
    sample, the rest of stall_timeout_ms, then burn if neither the generation nor the
    progress moved. Progress is per shard: the newest write id registered on the shard
    and its state row, both committed by every lock call. (The feed sequence is shared
    by all shards, so activity on another shard would hide a dead holder.)

    Burning (4.2) marks the holder's pending session abandoned and, compare-and-set on the
    sampled state row, increments the generation.

    Opening the write (4.3), with the lock held: check the generation, reap the other
    pending sessions of the shard that are not committing, allocate the block from the
    state row (headroom rule included) and advance the state row past it, upsert this
    session and store the write in the session setting. Any error after the lock was
    taken releases it. -#}
{% macro _postgres_routine_lock_wait(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set block = ctx['block'] -%}
  {%- set progress -%}
(select coalesce(pg_catalog.max(se.write_id), 0) from {{ q['session'] }} as se where se.shard_id = p_shard_id)
  {%- endset -%}
  {%- set body -%}
<<cf>>
declare
  v_generation bigint;
  v_now_generation bigint;
  v_key bigint;
  v_progress bigint;
  v_sample record;
  v_now record;
  v_started timestamptz := pg_catalog.clock_timestamp();
  v_hint_ms bigint;
  v_state record;
  v_holder record;
  v_ms bigint;
  v_high bytea;
  v_start bigint;
  v_rand bytea;
  v_seq bigint;
  v_fresh boolean;
begin
  if p_shard_id is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: lock on feed ' || {{ ctx['lit_feed'] }} || ': shard_id must not be null';
  end if;
  if pg_catalog.current_setting('transaction_isolation') <> 'read committed'
     or pg_catalog.pg_current_xact_id_if_assigned() is not null then
    raise exception using errcode = 'CF005',
      message = 'changefeed: ' || {{ changefeed._postgres_literal(ctx['n']['lock_wait']) }}
        || ' is internal; call the procedure ' || {{ changefeed._postgres_literal(ctx['n']['lock']) }}
        || ' outside a transaction block';
  end if;
  if coalesce(pg_catalog.current_setting({{ ctx['lit_guc'] }}, true), '') <> '' then
    raise exception using errcode = 'CF006',
      message = 'changefeed: a write on feed ' || {{ ctx['lit_feed'] }} || ' is already in progress on this connection ('
        || pg_catalog.current_setting({{ ctx['lit_guc'] }}, true) || ')',
      hint = 'Finish it with update_state() and COMMIT, or ROLLBACK and call release(), before the next lock.';
  end if;
  if p_time_hint is not null then
    if not pg_catalog.isfinite(p_time_hint)
       or p_time_hint < '1970-01-01 00:00:00+00'::timestamptz
       or p_time_hint >= '10889-08-02 05:31:50.656+00'::timestamptz then
      raise exception using errcode = 'CF007',
        message = 'changefeed: time_hint ' || p_time_hint::text || ' is outside the ULID time range [1970-01-01, 10889-08-02)';
    end if;
    v_hint_ms := {{ changefeed._postgres_sql_epoch_ms('p_time_hint') }};
  end if;

  insert into {{ q['state'] }} as st (shard_id, time_ms, ulid_high, ulid_low, generation)
  values (p_shard_id, 0, pg_catalog.decode('0000000000000000', 'hex'), 1, 0)
  on conflict do nothing;

  <<acquire>>
  loop
    select st.generation into v_generation from {{ q['state'] }} as st where st.shard_id = p_shard_id;
    v_key := pg_catalog.hashtextextended({{ ctx['lit_lock_prefix'] }} || p_shard_id::text || '/' || cf.v_generation::text, 0);
    if not {{ q['lock_try'] }}(v_key, {{ ctx['lock_probe_ms'] }}) then
      -- Progress is per shard: every lock holder commits a session row with a new, higher
      -- write id, and every commit moves the state row. (The feed sequence is shared by
      -- all shards, so activity on another shard would hide a dead holder here.)
      v_progress := {{ progress }};
      select st.time_ms, st.ulid_high, st.ulid_low, st.generation into v_sample
        from {{ q['state'] }} as st where st.shard_id = p_shard_id;
      if not {{ q['lock_try'] }}(v_key, {{ ctx['stall_timeout_ms'] - ctx['lock_probe_ms'] }}) then
        select st.time_ms, st.ulid_high, st.ulid_low, st.generation into v_now
          from {{ q['state'] }} as st where st.shard_id = p_shard_id;
        if v_now.generation <> v_generation then
          continue acquire;  -- someone else burned it
        end if;
        if v_now.time_ms <> v_sample.time_ms or v_now.ulid_high <> v_sample.ulid_high
           or v_now.ulid_low <> v_sample.ulid_low or ({{ progress }}) <> v_progress then
          continue acquire;  -- a moving queue, not a dead holder
        end if;
        -- Burn (4.2): abandon the holder's pending session, then move the generation on,
        -- compare-and-set on the sample (the same lock order as lock calls and tombstone:
        -- sessions, then the state row). A lock call or burn since the sample cancels it
        -- all. SKIP LOCKED passes over a session whose update_state is committing: it has
        -- released the lock, so it is not the holder.
        begin
          with abandoned as (
            update {{ q['session'] }} as se set state = 2, finished_at = pg_catalog.clock_timestamp()
             where (se.shard_id, se.session_id) in (
                     select s2.shard_id, s2.session_id from {{ q['session'] }} as s2
                      where s2.shard_id = p_shard_id and s2.state = 0 and s2.generation = cf.v_generation
                      for update skip locked)
               and se.state = 0
            returning se.session_id, se.write_id, se.first_ulid)
          select a.session_id, a.write_id into v_holder
            from abandoned as a order by a.first_ulid desc limit 1;
          update {{ q['state'] }} as st
             set generation = st.generation + 1
           where st.shard_id = p_shard_id and st.generation = cf.v_generation
             and st.time_ms = cf.v_sample.time_ms and st.ulid_high = cf.v_sample.ulid_high
             and st.ulid_low = cf.v_sample.ulid_low;
          if not found then
            raise exception using errcode = 'CF000';  -- undo the session update
          end if;
          insert into {{ q['incident'] }} as i
            (shard_id, generation, detected_at, reason, holder_session_id, holder_write_id, waited_ms)
          values (p_shard_id, cf.v_generation, pg_catalog.clock_timestamp(), 'stall',
                  cf.v_holder.session_id, cf.v_holder.write_id,
                  {{ changefeed._postgres_sql_epoch_ms('pg_catalog.clock_timestamp()') }}
                    - {{ changefeed._postgres_sql_epoch_ms('cf.v_started') }});
        exception when sqlstate 'CF000' then
          null;
        end;
        continue acquire;
      end if;
    end if;

    -- The lock of v_generation is ours; release it on any error from here on.
    begin
      select st.generation into v_now_generation from {{ q['state'] }} as st where st.shard_id = p_shard_id;
      if v_now_generation <> v_generation then
        perform pg_catalog.pg_advisory_unlock(v_key);  -- burned while we waited: take the new name
        continue acquire;
      end if;
      -- Reap the other pending sessions of the shard: while we hold the lock they are
      -- dead, burned or rolled back, except one whose update_state is committing right now
      -- (it released the lock before its COMMIT); SKIP LOCKED leaves that one alone, so
      -- this call never waits for another write's commit (sessions before state: the same
      -- lock order everywhere).
      update {{ q['session'] }} as se set state = 2, finished_at = pg_catalog.clock_timestamp()
       where (se.shard_id, se.session_id) in (
               select s2.shard_id, s2.session_id from {{ q['session'] }} as s2
                where s2.shard_id = p_shard_id and s2.state = 0 and s2.session_id <> pg_catalog.pg_backend_pid()
                for update skip locked)
         and se.state = 0;
      -- Only lock calls (and movers, burns, tombstones) change the state row, each in a
      -- short transaction of its own, so this waits for no application transaction.
      select st.time_ms, st.ulid_high, st.ulid_low, st.generation into v_state
        from {{ q['state'] }} as st where st.shard_id = p_shard_id for update;
      if v_state.generation <> v_generation then
        perform pg_catalog.pg_advisory_unlock(v_key);  -- burned while we waited: take the new name
        continue acquire;
      end if;

      v_ms := v_state.time_ms;
      v_high := v_state.ulid_high;
{{ changefeed._postgres_sql_next_block(ctx, 'p_shard_id',
     'coalesce(v_hint_ms, ' ~ changefeed._postgres_sql_epoch_ms('pg_catalog.clock_timestamp()') ~ ')',
     'v_ms', 'v_high', 'v_state.ulid_low', 'v_start', 'v_rand', 'v_fresh') }}

      -- Allocate (section 3): the block is taken from the state row now, committed with
      -- the pending session, so the next holder allocates above it without waiting for this
      -- write's COMMIT, and a reader sees the block pending until then (section 6).
      update {{ q['state'] }} as st
         set time_ms = cf.v_ms, ulid_high = cf.v_high, ulid_low = cf.v_start + {{ block }}
       where st.shard_id = p_shard_id;

      v_seq := pg_catalog.nextval({{ ctx['lit_sequence'] }}::pg_catalog.regclass);
      insert into {{ q['session'] }} as se
        (shard_id, session_id, write_id, state, generation, time_ms, ulid_high, block_start,
         first_ulid, before_ulid, expected_time_ms, expected_high, expected_low, started_at, finished_at)
      values (p_shard_id, pg_catalog.pg_backend_pid(), cf.v_seq, 0, cf.v_generation, cf.v_ms, cf.v_high, cf.v_start,
              cf.v_high || pg_catalog.int8send(cf.v_start),
              {{ changefeed._postgres_sql_ulid_before('cf.v_high', 'cf.v_start') }},
              cf.v_state.time_ms, cf.v_state.ulid_high, cf.v_state.ulid_low, pg_catalog.clock_timestamp(), null)
      on conflict on constraint {{ changefeed._postgres_ident(ctx['n']['session_pk']) }} do update
        set write_id = excluded.write_id, state = 0, generation = excluded.generation,
            time_ms = excluded.time_ms, ulid_high = excluded.ulid_high, block_start = excluded.block_start,
            first_ulid = excluded.first_ulid, before_ulid = excluded.before_ulid,
            expected_time_ms = excluded.expected_time_ms, expected_high = excluded.expected_high,
            expected_low = excluded.expected_low, started_at = excluded.started_at, finished_at = null;
      -- seq_start block_start ulid_high write_id shard_id generation
      perform pg_catalog.set_config({{ ctx['lit_guc'] }},
        v_seq::text || ' ' || v_start::text || ' ' || pg_catalog.encode(v_high, 'hex') || ' '
          || v_seq::text || ' ' || p_shard_id::text || ' ' || v_generation::text, false);
    exception when others or query_canceled then
      perform pg_catalog.pg_advisory_unlock(v_key);
      raise;
    end;
    o_write_id := v_seq;
    o_ulid_high := v_high;
    o_ulid_low := v_start;
    return next;
    return;
  end loop;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['lock_wait'] ~ '(p_shard_id integer, p_time_hint timestamptz)
returns table (o_write_id bigint, o_ulid_high bytea, o_ulid_low bigint)
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
