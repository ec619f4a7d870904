{#-
  Outbox mode (protocol section 5): the mover that gives committed outbox rows their ULIDs,
  and capture: trigger (5.1): the trigger function, the insert it runs, and the PL/pgSQL
  that setup, upgrade and teardown use to check the source and keep its triggers in sync.
-#}


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


{#- capture:<feed>() -> trigger: the trigger function of capture: trigger (protocol section 5).
    Statement-level AFTER triggers with transition tables call it once per statement, so a
    statement of n rows costs one INSERT ... SELECT rather than n function calls (measured:
    as fast as a row trigger for one row, 2-3x faster for bulk statements). Every row it
    writes carries the writer's transaction id (the outbox's default), so one source
    transaction stays one block (O2). An UPDATE records the old and the new keys (both are
    events when the key or the shard changes; `union` keeps one when neither does). TRUNCATE
    would remove rows without events, so it is refused.
    SECURITY DEFINER: the writer needs rights on the source table only. -#}
{% macro _postgres_routine_capture(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set body -%}
#variable_conflict use_column
begin
  -- The source's columns may be named like PL/pgSQL variables (found, tg_op): use_column
  -- makes them mean the column in the shard expression.
  if tg_op = 'INSERT' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_new', 'n')]) }};
  elsif tg_op = 'UPDATE' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_old', 'o'), ('cf_new', 'n')]) }};
  elsif tg_op = 'DELETE' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_old', 'o')]) }};
  else
    raise exception using errcode = 'CF009',
      message = 'changefeed: TRUNCATE of ' || {{ ctx['lit_source'] }} || ' would remove rows without events for the feed '
        || {{ ctx['lit_feed'] }} || ' (capture: trigger)',
      hint = 'Delete the rows instead (each becomes an event), or tear the feed down first.';
  end if;
  return null;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ ctx['q']['capture'] ~ '()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- `insert into <outbox> (shard_id, <keys>) select (<shard>), a.<keys> from <relation> as a
    [union select ...]`: the statement the capture trigger runs, over transition tables, and
    that setup runs over the source table (`where false`) to check the shard expression.
    The shard expression's columns are unqualified, so they resolve to the one relation of
    each select; the insert's assignment cast makes it an integer (text is refused). -#}
{% macro _postgres_sql_capture_insert(ctx, sources, where='') %}
  {%- set selects = [] -%}
  {%- for relation, alias in sources -%}
    {%- set keys = [] -%}
    {%- for key in ctx['spec']['keys'] -%}
      {%- do keys.append(alias ~ '.' ~ changefeed._postgres_ident(key['name'])) -%}
    {%- endfor -%}
    {%- do selects.append('select (' ~ ctx['shard'] ~ '), ' ~ keys | join(', ') ~ ' from ' ~ relation ~ ' as ' ~ alias ~ where) -%}
  {%- endfor -%}
  {{ return('insert into ' ~ ctx['q']['outbox'] ~ ' (shard_id, ' ~ ctx['key_list'] ~ ')\n    '
            ~ selects | join('\n    union\n    ')) }}
{% endmacro %}


{#-
  An event for every row a dbt model's table already has, when its feed is created by
  feed_post_hook (macros/_feed/spec.sql, _feed_model_rules): the capture's own insert
  over the whole table, under the capture's search_path. It runs in the model's
  transaction right after the triggers were created, so no write falls between the two.
-#}
{% macro _postgres_sql_seed(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set seed = changefeed._postgres_sql_capture_insert(ctx, [(ctx['q_source'], 's')]) -%}
  {%- set code -%}
do $cf_seed$
declare
  v_search_path text := pg_catalog.current_setting('search_path');
begin
  perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  execute {{ lit(seed) }};
  perform pg_catalog.set_config('search_path', v_search_path, true);
end
$cf_seed$
  {%- endset -%}
  {{ return(code) }}
{% endmacro %}


{#-
  PL/pgSQL for the setup, upgrade and teardown DO blocks that makes the source table's
  capture triggers match the config (protocol section 5, capture: trigger).

  _postgres_sql_capture_check: for capture: trigger, refuse a source that cannot fire
  statement triggers with transition tables, and run the trigger's own insert over the
  source table with `where false` under the trigger's search_path, so that a shard
  expression naming a missing column, an unqualified function outside pg_catalog, or a
  non-integer fails at setup, with the expression in the message, not at the first
  write. Runs before the capture function is (re)created.

  _postgres_sql_capture_sync: capture: trigger creates the triggers that are missing (a
  table rebuilt by dbt loses them); capture: none drops any that exist, then the function.
  Teardown passes mode none (drop the triggers only). Each trigger is looked up first: DROP/CREATE TRIGGER lock the source table, and setup
  must not lock it when there is nothing to do.
-#}
{% macro _postgres_sql_capture_check(ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return('') }}
  {%- endif -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set check = changefeed._postgres_sql_capture_insert(ctx, [(ctx['q_source'], 's')], ' where false') -%}
  {%- set code -%}
  -- capture: trigger: the source must be a table, and the shard expression must work on it.
  if coalesce((select c.relkind from pg_catalog.pg_class as c
                where c.oid = pg_catalog.to_regclass({{ ctx['lit_source'] }})), '?') not in ('r', 'p') then
    raise exception using errcode = 'CF007',
      message = 'changefeed: capture: trigger needs an ordinary or partitioned table, and '
        || {{ ctx['lit_source'] }} || ' is not one (views, materialized and foreign tables cannot have'
        || ' statement triggers with transition tables)';
  end if;
  declare
    v_search_path text := pg_catalog.current_setting('search_path');
  begin
    perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    begin
      execute {{ lit(check) }};
    exception when others then
      raise exception using errcode = 'CF007',
        message = 'changefeed: the shard expression ' || {{ lit(ctx['shard']) }} || ' of the feed '
          || {{ ctx['lit_feed'] }} || ' does not work on ' || {{ ctx['lit_source'] }} || ': ' || sqlerrm,
        hint = 'It must give an integer from the columns of one source row (not null for any row), and it'
          || ' runs with search_path = pg_catalog, pg_temp: qualify functions of other schemas.';
    end;
    perform pg_catalog.set_config('search_path', v_search_path, true);
  end;
  {%- endset -%}
  {{ return(code) }}
{% endmacro %}


{% macro _postgres_sql_capture_sync(ctx) %}
  {%- if ctx['mode'] == 'blocking' -%}
    {{ return('') }}
  {%- endif -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set names = ctx['capture_names'] -%}
  {%- set events = {
      'capture_insert': 'after insert on ' ~ ctx['q_source'] ~ ' referencing new table as cf_new',
      'capture_update': 'after update on ' ~ ctx['q_source'] ~ ' referencing old table as cf_old new table as cf_new',
      'capture_delete': 'after delete on ' ~ ctx['q_source'] ~ ' referencing old table as cf_old',
      'capture_truncate': 'before truncate on ' ~ ctx['q_source'],
  } -%}
  {%- set lines = [] -%}
  {%- for kind in changefeed._postgres_capture_trigger_kinds() -%}
    {%- set name = changefeed._postgres_ident(names[kind]) -%}
    {%- set exists = 'exists (select 1 from pg_catalog.pg_trigger as t where t.tgrelid = pg_catalog.to_regclass('
        ~ ctx['lit_source'] ~ ') and t.tgname = ' ~ lit(names[kind]) ~ ')' -%}
    {%- if ctx['capture'] == 'trigger' -%}
      {%- do lines.append('  if not ' ~ exists ~ ' then\n    execute ' ~ lit('create trigger ' ~ name ~ ' ' ~ events[kind]
          ~ ' for each statement execute function ' ~ ctx['q']['capture'] ~ '()') ~ ';\n  end if;') -%}
    {%- else -%}
      {%- do lines.append('  if ' ~ exists ~ ' then\n    execute ' ~ lit('drop trigger ' ~ name ~ ' on ' ~ ctx['q_source']) ~ ';\n  end if;') -%}
    {%- endif -%}
  {%- endfor -%}
  {#- mode none is teardown, which drops the function with the other routines. -#}
  {%- if ctx['capture'] != 'trigger' and ctx['mode'] == 'outbox' -%}
    {%- do lines.append('  execute ' ~ lit('drop function if exists ' ~ ctx['schema'] ~ '.' ~ changefeed._postgres_ident(names['capture']) ~ '()') ~ ';') -%}
  {%- endif -%}
  {{ return(lines | join('\n')) }}
{% endmacro %}


{#- True when capture: trigger and the source table lacks one of its capture triggers. -#}
{% macro _postgres_capture_missing(ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return(false) }}
  {%- endif -%}
  {%- set names = [] -%}
  {%- for kind in changefeed._postgres_capture_trigger_kinds() -%}
    {%- do names.append(changefeed._postgres_literal(ctx['capture_names'][kind])) -%}
  {%- endfor -%}
  {%- set found = changefeed._postgres_query_json(
      "select pg_catalog.json_build_object('n', pg_catalog.count(*)) from pg_catalog.pg_trigger as t"
      ~ " where t.tgrelid = pg_catalog.to_regclass(" ~ ctx['lit_source'] ~ ")"
      ~ " and t.tgname = any (array[" ~ names | join(', ') ~ "]::text[])") -%}
  {{ return(found['n'] != names | length) }}
{% endmacro %}
