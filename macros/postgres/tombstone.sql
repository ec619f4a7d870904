{#-
  tombstone (protocol section 6): a reader abandons a stuck pending write and burns the
  shard's lock generation. (The stall burn of section 4.2 is part of lock_wait, writer.sql.)
-#}


{#- tombstone:<feed>(shard_id, session_id, write_id) -> boolean: protocol section 6. Marks
    a pending session abandoned, burns the shard's lock generation (so that waiting
    writers stop waiting for the stale holder) and records an incident. Returns whether it
    won the race with that write's update_state (S3: both update the same session row with
    the predicate state = 0). -#}
{% macro _postgres_routine_tombstone(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_session record;
begin
  update {{ q['session'] }} as se set state = 2, finished_at = pg_catalog.clock_timestamp()
   where se.shard_id = p_shard_id and se.session_id = p_session_id
     and se.write_id = p_write_id and se.state = 0
  returning se.generation, se.started_at into v_session;
  if not found then
    return false;
  end if;
  -- Burn the session's generation (protocol 4.2), so that writers waiting for the stale
  -- holder's lock name move on to the next name.
  update {{ q['state'] }} as st
     set generation = st.generation + 1
   where st.shard_id = p_shard_id and st.generation = cf.v_session.generation;
  insert into {{ q['incident'] }} as i
    (shard_id, generation, detected_at, reason, holder_session_id, holder_write_id, waited_ms)
  values (p_shard_id, cf.v_session.generation, pg_catalog.clock_timestamp(), 'tombstone',
          p_session_id, p_write_id,
          {{ changefeed._postgres_sql_epoch_ms('pg_catalog.clock_timestamp()') }}
            - {{ changefeed._postgres_sql_epoch_ms('cf.v_session.started_at') }});
  return true;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['tombstone'] ~ '(p_shard_id integer, p_session_id integer, p_write_id bigint)
returns boolean
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
