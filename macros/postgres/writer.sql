{#-
  The blocking-mode writer's routines (protocol section 4): lock (a procedure, 4.1-4.3)
  with its privileged body lock_wait and its advisory-lock helper lock_try (also used by
  the outbox mover), update_state (4.4) and release (section 6).
-#}


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
  -- Every operator is qualified (OPERATOR(pg_catalog.x)) and messages use pg_catalog.concat:
  -- this runs with the caller's search_path, which may put a schema before pg_catalog.
  if v_probe is null
     or v_probe operator(pg_catalog.<>) 'cannot commit while a subtransaction is active' then
    begin
      perform {{ q['lock_try'] }}(null, null);
    exception when invalid_transaction_termination then
      get stacked diagnostics v_reference = message_text;
    end;
    if coalesce(v_probe operator(pg_catalog.=) v_reference, v_probe is null and v_reference is null) then
      raise exception using
        errcode = 'CF005',
        message = pg_catalog.concat('changefeed: lock on feed ', {{ ctx['lit_feed'] }},
          ' was called inside a transaction block; it must run outside one (autocommit), because it commits'),
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
{{ changefeed._postgres_sql_incident_trim(ctx, 'p_shard_id') }}
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
      -- Clean (protocol section 6): a lock call that finds {{ ctx['session_clean_at'] }} or more finished
      -- sessions (committed or abandoned) of other connections on its shard deletes those
      -- whose backend has exited, so the shard keeps fewer than {{ ctx['session_clean_at'] }} rows of gone
      -- connections beside one row per live writer, however many come and go and however
      -- the feed's write ids fall across shards. Counting first keeps the scan of
      -- pg_stat_get_activity off the path of a shard with few writers. Never a pending row
      -- (state 0): those are what the safe point reads, and the re-check under the row lock
      -- keeps one that a racing call made pending. SKIP LOCKED: never wait for a write that
      -- is committing.
      if (select pg_catalog.count(*) from {{ q['session'] }} as s2
           where s2.shard_id = p_shard_id and s2.state <> 0
             and s2.session_id <> pg_catalog.pg_backend_pid()) >= {{ ctx['session_clean_at'] }} then
        delete from {{ q['session'] }} as se
         where (se.shard_id, se.session_id) in (
                 select s2.shard_id, s2.session_id from {{ q['session'] }} as s2
                  where s2.shard_id = p_shard_id and s2.state <> 0
                    and s2.session_id <> pg_catalog.pg_backend_pid()
                    and s2.session_id not in (select a.pid from pg_catalog.pg_stat_get_activity(null) as a
                                               where a.pid is not null)
                  for update skip locked)
           and se.state <> 0;
      end if;
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


{#- lock_try:<feed>(key, wait_ms, xact) -> boolean: take a session (or, with xact, a
    transaction) advisory lock, waiting at most wait_ms. lock_timeout is set only around
    the wait and caught here, because a procedure that commits cannot have an exception
    handler around its COMMITs (protocol 4.2). Internal to lock: and move_outbox:.
    A session lock this session already holds is reported as taken, not taken twice.
    Called with a null key it runs COMMIT, which fails in a function; lock: uses that
    error's wording to recognise a call inside a transaction block. -#}
{% macro _postgres_routine_lock_try(ctx) %}
  {%- set body -%}
<<cf>>
declare
  v_old text;
begin
  if p_key is null then
    commit;
  end if;
  -- Already held by this session (left over from a write whose transaction was cancelled
  -- after the lock was taken)? Then it is ours: taking it again would count it twice, and
  -- update_state's single unlock would leave it held for good.
  if not p_xact and exists (
      select 1 from pg_catalog.pg_locks as l
       where l.locktype = 'advisory' and l.pid = pg_catalog.pg_backend_pid() and l.objsubid = 1
         and l.classid = ((p_key >> 32) & 4294967295)::oid and l.objid = (p_key & 4294967295)::oid
         and l.granted) then
    return true;
  end if;
  v_old := pg_catalog.current_setting('lock_timeout');
  begin
    perform pg_catalog.set_config('lock_timeout', greatest(p_wait_ms, 1)::text || 'ms', true);
    if p_xact then
      perform pg_catalog.pg_advisory_xact_lock(p_key);
    else
      perform pg_catalog.pg_advisory_lock(p_key);
    end if;
    perform pg_catalog.set_config('lock_timeout', v_old, true);
    return true;
  exception when lock_not_available then
    -- The timeout may fire just after the lock was granted (the waiter was woken late);
    -- the error then says timeout, but a session lock is held all the same, and rolling
    -- back the subtransaction does not release it. Report what is true. (A transaction
    -- lock is released by that rollback.)
    if not p_xact and exists (
        select 1 from pg_catalog.pg_locks as l
         where l.locktype = 'advisory' and l.pid = pg_catalog.pg_backend_pid() and l.objsubid = 1
           and l.classid = ((p_key >> 32) & 4294967295)::oid and l.objid = (p_key & 4294967295)::oid
           and l.granted) then
      return true;
    end if;
    return false;
  end;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ ctx['q']['lock_try']
      ~ '(p_key bigint, p_wait_ms integer, p_xact boolean default false)
returns boolean
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


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


{#- guard:<feed>() -> trigger: protocol 4.5 (trusted writers), blocking mode. A statement
    trigger after insert on the feed table (transition table cf_new) checks that every
    inserted row lies in the shard and the block of this connection's pending write, so
    that no writer can publish below the safe point (a row there is never read) or into
    another write's block. The write is looked up in the session table (which writers
    cannot change), not trusted from the session setting. One indexed lookup and one scan
    of the statement's new rows per statement. -#}
{% macro _postgres_routine_guard(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_parts text[] := pg_catalog.string_to_array(pg_catalog.current_setting({{ ctx['lit_guc'] }}, true), ' ');
  v_session record;
  v_bad record;
begin
  select null::integer as shard_id into v_session;
  if v_parts[6] is not null then
    select se.shard_id, se.state, se.first_ulid,
           se.ulid_high || pg_catalog.int8send(se.block_start + {{ ctx['block'] - 1 }}) as last_ulid
      into v_session
      from {{ q['session'] }} as se
     where se.shard_id = v_parts[5]::integer and se.session_id = pg_catalog.pg_backend_pid()
       and se.write_id = v_parts[4]::bigint;
  end if;
  if v_session.shard_id is null then
    raise exception using errcode = 'CF004',
      message = 'changefeed: an insert into the feed table of ' || {{ ctx['lit_feed'] }}
        || ' without a write in progress on this connection',
      hint = 'Call the procedure ' || {{ changefeed._postgres_literal(q['lock']) }}
        || ' first and number the rows with ulid(nextval(...)); update_state() ends the write.';
  end if;
  if v_session.state <> 0 then
    raise exception using errcode = 'CF001',
      message = 'changefeed: write ' || v_parts[4] || ' on ' || {{ ctx['lit_feed'] }} || ' shard '
        || v_parts[5] || ' was abandoned (burned after a stall, tombstoned or reaped); roll back and retry',
      hint = 'ROLLBACK, call release(), and run the transaction again.';
  end if;
  select n.shard_id, n.ulid into v_bad from cf_new as n
   where n.shard_id <> cf.v_session.shard_id or n.ulid < cf.v_session.first_ulid
      or n.ulid > cf.v_session.last_ulid
   limit 1;
  if found then
    raise exception using errcode = 'CF012',
      message = 'changefeed: a row of shard ' || v_bad.shard_id::text || ' with ULID '
        || pg_catalog.encode(v_bad.ulid, 'hex') || ' is outside this write''s shard ' || v_session.shard_id::text
        || ' and block [' || pg_catalog.encode(v_session.first_ulid, 'hex') || ', '
        || pg_catalog.encode(v_session.last_ulid, 'hex') || '] on ' || {{ ctx['lit_feed'] }} || '; the statement is refused',
      hint = 'Insert events with shard_id = the locked shard and ulid = ulid(nextval(...)) (PostgresFeed.write / Write.ulid_sql).';
  end if;
  return null;
end
  {%- endset -%}
  {{ return(changefeed._postgres_definer_function(q['guard'], 'trigger', body)) }}
{% endmacro %}


{#- PL/pgSQL for setup and upgrade: create the guard trigger on the feed table if it is
    missing (blocking mode; a feed set up by an older package has none). -#}
{% macro _postgres_sql_guard_sync(ctx) %}
  {%- if ctx['mode'] != 'blocking' -%}
    {{ return('') }}
  {%- endif -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set code -%}
  if not exists (select 1 from pg_catalog.pg_trigger as t
                  where t.tgrelid = pg_catalog.to_regclass({{ lit(ctx['q']['feed']) }})
                    and t.tgname = {{ lit(ctx['n']['guard']) }}) then
    execute {{ lit('create trigger ' ~ changefeed._postgres_ident(ctx['n']['guard']) ~ ' after insert on '
                   ~ ctx['q']['feed'] ~ ' referencing new table as cf_new for each statement execute function '
                   ~ ctx['q']['guard'] ~ '()') }};
  end if;
  {%- endset -%}
  {{ return(code) }}
{% endmacro %}


{#- release:<feed>() -> boolean: after a ROLLBACK (or a failed COMMIT), abandon this
    connection's write and release its lock if it still holds it. Idempotent: returns
    false when there was no write to release. -#}
{% macro _postgres_routine_release(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_parts text[] := pg_catalog.string_to_array(pg_catalog.current_setting({{ ctx['lit_guc'] }}, true), ' ');
  v_write_id bigint;
  v_shard integer;
  v_key bigint;
begin
  if v_parts[6] is null then
    return false;
  end if;
  v_write_id := v_parts[4]::bigint;
  v_shard := v_parts[5]::integer;
  v_key := pg_catalog.hashtextextended({{ ctx['lit_lock_prefix'] }} || v_shard::text || '/' || v_parts[6], 0);
  update {{ q['session'] }} as se set state = 2, finished_at = pg_catalog.clock_timestamp()
   where se.shard_id = cf.v_shard and se.session_id = pg_catalog.pg_backend_pid()
     and se.write_id = cf.v_write_id and se.state = 0;
  -- update_state releases the lock before COMMIT; if that COMMIT failed, the lock is gone.
  if exists (select 1 from pg_catalog.pg_locks as l
              where l.locktype = 'advisory' and l.pid = pg_catalog.pg_backend_pid() and l.objsubid = 1
                and l.classid = ((cf.v_key >> 32) & 4294967295)::oid
                and l.objid = (cf.v_key & 4294967295)::oid and l.granted) then
    perform pg_catalog.pg_advisory_unlock(v_key);
  end if;
  perform pg_catalog.set_config({{ ctx['lit_guc'] }}, '', false);
  return true;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['release'] ~ '()
returns boolean
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
