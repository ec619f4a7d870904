{#- move_outbox:<feed>(shard_id, max_rows) -> moved: protocol section 5. Under the shard's
    mover lock (a transaction advisory lock, waited for at most stall_timeout_ms; if another
    mover holds it longer, this call moves nothing), in the caller's transaction (a CALL in
    autocommit is its own short transaction):
    1. take the committed outbox rows' source transactions in order of their smallest
       order_sequence: every transaction with a row among the first max_rows rows, whole;
    2. give each one block, its time the running maximum of max(time_hint) and the state;
    3. insert the events, delete exactly the moved outbox rows, advance the state row.
    Row counts are checked: inserted = deleted = selected, or the move fails. -#}
{% macro _postgres_routine_move_outbox(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set block = ctx['block'] -%}
  {%- set body -%}
<<cf>>
declare
  -- Parameters as block variables: every name in the queries below is qualified, so no
  -- key column of the outbox or feed table can shadow it.
  v_shard integer := p_shard_id;
  v_max_rows integer := p_max_rows;
  v_state record;
  v_txids xid8[];
  v_hints bigint[];
  v_counts bigint[];
  v_highs bytea[] := '{}';
  v_starts bigint[] := '{}';
  v_total bigint;
  v_inserted bigint;
  v_deleted bigint;
  v_ms bigint;
  v_high bytea;
  v_start bigint;
  v_next bigint;
  v_rand bytea;
  v_fresh boolean;
begin
  moved := 0;
  if p_shard_id is null or p_max_rows is null or p_max_rows < 1 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: move_outbox on ' || {{ ctx['lit_feed'] }} || ' needs a shard_id and max_rows of at least 1';
  end if;
  if not {{ q['lock_try'] }}(pg_catalog.hashtextextended({{ ctx['lit_mover_prefix'] }} || p_shard_id::text, 0),
                             {{ ctx['stall_timeout_ms'] }}, true) then
    return;
  end if;
  insert into {{ q['state'] }} as st (shard_id, time_ms, ulid_high, ulid_low, generation)
  values (cf.v_shard, 0, pg_catalog.decode('0000000000000000', 'hex'), 1, 0)
  on conflict do nothing;
  select st.time_ms, st.ulid_high, st.ulid_low into v_state
    from {{ q['state'] }} as st where st.shard_id = cf.v_shard for update;

  select pg_catalog.array_agg(t.txid order by t.first_sequence),
         pg_catalog.array_agg(t.hint_ms order by t.first_sequence),
         pg_catalog.array_agg(t.n order by t.first_sequence),
         pg_catalog.sum(t.n)
    into v_txids, v_hints, v_counts, v_total
    from (select o.txid, pg_catalog.min(o.order_sequence) as first_sequence,
                 {{ changefeed._postgres_sql_epoch_ms('pg_catalog.max(o.time_hint)') }} as hint_ms,
                 pg_catalog.count(*) as n
            from {{ q['outbox'] }} as o
           where o.shard_id = cf.v_shard
             and o.txid in (select w.txid from {{ q['outbox'] }} as w
                             where w.shard_id = cf.v_shard
                             order by w.order_sequence limit cf.v_max_rows)
           group by o.txid) as t;
  if v_txids is null then
    return;
  end if;

  v_ms := v_state.time_ms;
  v_high := v_state.ulid_high;
  v_next := v_state.ulid_low;
  for i in 1 .. pg_catalog.array_length(v_txids, 1) loop
    if v_counts[i] > {{ block }} then
      raise exception using errcode = 'CF003',
        message = 'changefeed: a transaction wrote ' || v_counts[i]::text || ' outbox rows to ' || {{ ctx['lit_feed'] }}
          || ' shard ' || p_shard_id::text || '; one transaction may write at most 2^{{ ctx['block_bits'] }}';
    end if;
{{ changefeed._postgres_sql_next_block(ctx, 'p_shard_id', 'v_hints[i]', 'v_ms', 'v_high', 'v_next',
                                       'v_start', 'v_rand', 'v_fresh') }}
    v_highs := v_highs || v_high;
    v_starts := v_starts || v_start;
    v_next := v_start + {{ block }};
  end loop;

  insert into {{ q['feed'] }} as f (shard_id, ulid, {{ ctx['key_list'] }})
  select o.shard_id,
         b.high || pg_catalog.int8send(b.start
           + (pg_catalog.row_number() over (partition by o.txid order by o.order_sequence)) - 1),
         {{ ctx['key_list_o'] }}
    from {{ q['outbox'] }} as o
    join unnest(cf.v_txids, cf.v_highs, cf.v_starts) as b (txid, high, start) on b.txid = o.txid
   where o.shard_id = cf.v_shard;
  get diagnostics v_inserted = row_count;
  delete from {{ q['outbox'] }} as o where o.shard_id = cf.v_shard and o.txid = any (cf.v_txids);
  get diagnostics v_deleted = row_count;
  if v_inserted <> v_total or v_deleted <> v_total then
    raise exception using errcode = 'XX000',
      message = 'changefeed: move_outbox on ' || {{ ctx['lit_feed'] }} || ' shard ' || p_shard_id::text
        || ' selected ' || v_total::text || ' rows but inserted ' || v_inserted::text
        || ' and deleted ' || v_deleted::text || '; nothing was moved';
  end if;
  update {{ q['state'] }} as st set time_ms = cf.v_ms, ulid_high = cf.v_high, ulid_low = cf.v_next
   where st.shard_id = cf.v_shard;
  moved := v_inserted;
end
  {%- endset -%}
  {{ return('create or replace procedure ' ~ q['move_outbox'] ~ '(p_shard_id integer, p_max_rows integer default 10000, inout moved bigint default null)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
