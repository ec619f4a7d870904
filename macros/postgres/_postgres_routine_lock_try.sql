{#- lock_try:<feed>(key, wait_ms, xact) -> boolean: take a session (or, with xact, a
    transaction) advisory lock, waiting at most wait_ms. lock_timeout is set only around
    the wait and caught here, because a procedure that commits cannot have an exception
    handler around its COMMITs (protocol 4.2). Internal to lock: and move_outbox:.
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
    return false;
  end;
end
  {%- endset -%}
  {{ return('create function ' ~ ctx['q']['lock_try']
      ~ '(p_key bigint, p_wait_ms integer, p_xact boolean default false)
returns boolean
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
