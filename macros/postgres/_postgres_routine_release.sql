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
