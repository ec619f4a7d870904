{#-
  The reader's routines: read_feed (protocol section 8), safe_point (section 6), shards
  (the feed's shards, for readers not told them; section 9), tombstone, a reader's way
  out of a write that never finishes (section 6), and the read barrier (section 7):
  barrier_acquire and barrier_check, at the end of this file.
-#}


{#- read_feed:<feed>(shard_id, cursor, page_size) -> setof feed rows: protocol section 8.
    Events with cursor < ulid <= safe point, in ULID order, at most page_size of them, and
    a full page ends at the last complete block (a transaction larger than page_size is
    returned whole). STABLE, so the safe point and every query below share the calling
    statement's snapshot (S4). Blocks are aligned to 2^block_bits, so a ULID's block is its
    first 16 bytes with the low block_bits bits cleared. -#}
{% macro _postgres_routine_read_feed(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set bits = ctx['block_bits'] -%}
  {#- block_bits = 36: byte 11 keeps its high nibble, bytes 12-15 (0-based) clear. -#}
  {%- set body -%}
<<cf>>
declare
  -- Parameters as block variables: every name in the queries below is qualified, so no
  -- key column of the feed table can shadow it.
  v_shard integer := p_shard_id;
  v_cursor bytea := p_cursor;
  v_page_size integer := p_page_size;
  v_safe bytea;
  v_next bytea;
  v_first bytea;
  v_block_start bytea;
begin
  if p_shard_id is null or p_page_size is null or p_page_size < 1 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: read_feed on ' || {{ ctx['lit_feed'] }} || ' needs a shard_id and a page_size of at least 1';
  end if;
  if p_cursor is null or pg_catalog.length(p_cursor) <> 16 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: read_feed on ' || {{ ctx['lit_feed'] }} || ': the cursor must be 16 bytes (16 zero bytes for the beginning)';
  end if;
{{ changefeed._postgres_sql_retention_check(ctx) }}
  select sp.safe_point into v_safe from {{ q['safe_point'] }}(p_shard_id) as sp;
  -- The event after a full page, if any.
  select f.ulid into v_next from {{ q['feed'] }} as f
   where f.shard_id = cf.v_shard and f.ulid > cf.v_cursor and f.ulid <= cf.v_safe
   order by f.ulid offset cf.v_page_size limit 1;
  if v_next is null then
    return query select f.* from {{ q['feed'] }} as f
      where f.shard_id = cf.v_shard and f.ulid > cf.v_cursor and f.ulid <= cf.v_safe
      order by f.ulid;
    return;
  end if;
  v_block_start := {{ changefeed._postgres_sql_block_edge('cf.v_next', ctx['block_bits'], false) }};
  select f.ulid into v_first from {{ q['feed'] }} as f
   where f.shard_id = cf.v_shard and f.ulid > cf.v_cursor and f.ulid <= cf.v_safe
   order by f.ulid limit 1;
  if v_first >= v_block_start then
    -- One transaction larger than the page: return it whole.
    return query select f.* from {{ q['feed'] }} as f
      where f.shard_id = cf.v_shard and f.ulid > cf.v_cursor and f.ulid <= cf.v_safe
        and f.ulid <= {{ changefeed._postgres_sql_block_edge('cf.v_next', ctx['block_bits'], true) }}
      order by f.ulid;
  else
    return query select f.* from {{ q['feed'] }} as f
      where f.shard_id = cf.v_shard and f.ulid > cf.v_cursor and f.ulid < cf.v_block_start
      order by f.ulid;
  end if;
end
  {%- endset -%}
  {%- set header -%}
create or replace function {{ q['read_feed'] }}(
  p_shard_id integer,
  p_cursor bytea default pg_catalog.decode('00000000000000000000000000000000', 'hex'),
  p_page_size integer default 1000)
returns setof {{ q['feed'] }}
language plpgsql stable
security definer
set search_path = pg_catalog, pg_temp
as
  {%- endset %}
  {{ return(header ~ ' ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- safe_point:<feed>(shard_id) -> (safe_point, head, pending): protocol section 6, from
    the state row and the session table only (its cost does not grow with the feed).
    head = ulid_high || int8(ulid_low - 1), the last ULID of the last allocated block,
    in signed arithmetic: after a block that ended at -1 the next free start is 0, and
    the head is still that block's last ULID (16 zero bytes for a new shard);
    safe_point = least(head, the ULID below the first ULID of every pending session of
    the shard, of any generation: a burned holder's session is abandoned by the burn, and
    one that is committing keeps its block until it has). One statement, so one
    snapshot. -#}
{% macro _postgres_routine_safe_point(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
{{ changefeed._postgres_sql_require_shard(ctx, 'safe_point') }}
  return query
select least(h.head, p.first_pending) as safe_point, h.head, p.pending
  from (select coalesce(
                 (select st.ulid_high || pg_catalog.int8send(st.ulid_low - 1)
                    from {{ q['state'] }} as st where st.shard_id = $1),
                 pg_catalog.decode('00000000000000000000000000000000', 'hex')) as head) as h,
       (select (select se.before_ulid
                  from {{ q['session'] }} as se
                 where se.shard_id = $1 and se.state = 0
                 order by se.before_ulid limit 1) as first_pending,
               (select pg_catalog.count(*)::integer
                  from {{ q['session'] }} as se
                 where se.shard_id = $1 and se.state = 0) as pending) as p;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['safe_point'] ~ '(p_shard_id integer)
returns table (safe_point bytea, head bytea, pending integer)
language plpgsql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- PL/pgSQL: refuse a null p_shard_id with CF007 naming the routine (protocol C4). -#}
{% macro _postgres_sql_require_shard(ctx, routine) %}
  if p_shard_id is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: {{ routine }} on ' || {{ ctx['lit_feed'] }} || ' needs a shard_id (an integer), not null';
  end if;
{%- endmacro %}


{#- shards:<feed>() -> setof shard_id: the feed's shards, in order: those with a state row
    and, in outbox mode, those with unmoved outbox rows. SECURITY DEFINER, because the
    reader role may not read the state or the outbox, yet a reader that is not told its
    shards (the Spark source without its `shards` option) must find them all. -#}
{% macro _postgres_routine_shards(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
select st.shard_id from {{ q['state'] }} as st
{%- if ctx['mode'] == 'outbox' %}
union
select o.shard_id from {{ q['outbox'] }} as o
{%- endif %}
order by 1
  {%- endset -%}
  {{ return('create or replace function ' ~ q['shards'] ~ '()
returns table (shard_id integer)
language sql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


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


{#- -- The read barrier (protocol section 7): barrier_acquire takes a position,
    barrier_check says when the safe point (and, in outbox mode, the mover) has
    passed it. -#}


{#- barrier_acquire:<feed>(shard_id) -> (position, outbox_sequence): protocol section 7.
    position is the shard's highest committed ULID in this statement's snapshot (16 zero
    bytes if none), one backward step of the primary key; not the head, which also covers
    blocks of writes still in flight, so that a writer that dies would hold the barrier.
    outbox_sequence (outbox mode; null in blocking mode) is the feed sequence's current
    value, at or above the order_sequence of every outbox row committed before the call. -#}
{% macro _postgres_routine_barrier_acquire(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
{{ changefeed._postgres_sql_require_shard(ctx, 'barrier_acquire') }}
  return query
select coalesce((select f.ulid from {{ q['feed'] }} as f
                   where f.shard_id = $1 order by f.ulid desc limit 1),
                 pg_catalog.decode('00000000000000000000000000000000', 'hex')) as "position",
       {% if ctx['mode'] == 'outbox' %}(select s.last_value from {{ q['sequence'] }} as s){% else %}null::bigint{% endif %} as outbox_sequence;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_acquire'] ~ '(p_shard_id integer)
returns table ("position" bytea, outbox_sequence bigint)
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- barrier_check:<feed>(shard_id, position, outbox_sequence) -> boolean: protocol section 7.
    True when the safe point has reached position and (outbox mode) no outbox row of the
    shard numbered at or below outbox_sequence remains unmoved. -#}
{% macro _postgres_routine_barrier_check(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
  if p_shard_id is null or p_position is null or pg_catalog.octet_length(p_position) <> 16
     {%- if ctx['mode'] == 'outbox' %} or p_outbox_sequence is null{% endif %} then
    raise exception using errcode = 'CF007',
      message = 'changefeed: barrier_check on ' || {{ ctx['lit_feed'] }} || ' needs a shard_id, a position of 16 bytes'
        {%- if ctx['mode'] == 'outbox' %} || ' and an outbox_sequence'{% endif %} || ', as barrier_acquire returned them'
        || ' (got shard_id ' || coalesce(p_shard_id::text, 'null') || ', position of '
        || coalesce(pg_catalog.octet_length(p_position)::text || ' bytes', 'null')
        || ', outbox_sequence ' || coalesce(p_outbox_sequence::text, 'null') || ')';
  end if;
  return (select sp.safe_point from {{ q['safe_point'] }}($1) as sp) >= $2
{%- if ctx['mode'] == 'outbox' %}
   and not exists (select 1 from {{ q['outbox'] }} as o
                    where o.shard_id = $1 and o.order_sequence <= $3)
{%- endif %};
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_check'] ~ '(p_shard_id integer, p_position bytea, p_outbox_sequence bigint default null)
returns boolean
language plpgsql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
