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
