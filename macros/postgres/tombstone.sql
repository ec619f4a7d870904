{#-
  tombstone (protocol section 6): a reader abandons a stuck pending write and burns the
  shard's lock generation. (The stall burn of section 4.2 is part of lock_wait, writer.sql.)
-#}


{#- PL/pgSQL: keep the newest incident_keep incidents of a shard (protocol section 6,
    cleaning), after a burn or a tombstone added one. Incidents are rare, so the scan of
    the shard's incidents this costs is too. -#}
{% macro _postgres_sql_incident_trim(ctx, shard) %}
  delete from {{ ctx['q']['incident'] }} as i
   where i.shard_id = {{ shard }}
     and i.detected_at < (select i2.detected_at from {{ ctx['q']['incident'] }} as i2
                           where i2.shard_id = {{ shard }}
                           order by i2.detected_at desc offset {{ ctx['incident_keep'] - 1 }} limit 1);
{%- endmacro %}


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
  if p_shard_id is null or p_session_id is null or p_write_id is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: tombstone on ' || {{ ctx['lit_feed'] }}
        || ' needs a shard_id, a session_id and a write_id (integers, from the pending session row), not null';
  end if;
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
{{ changefeed._postgres_sql_incident_trim(ctx, 'p_shard_id') }}
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
