{#-
  Outbox mode (protocol section 5): the mover that gives committed outbox rows their ULIDs,
  and capture: trigger (5.1): the trigger function, the insert it runs, and the PL/pgSQL
  that setup, upgrade and teardown use to check the source and keep its triggers in sync.
-#}


{#- move_outbox:<feed>(shard_id, max_rows) -> moved: protocol section 5. Under the shard's
    mover lock (a transaction advisory lock, waited for at most stall_timeout_ms; if another
    mover holds it longer, this call moves nothing), in the caller's transaction (a CALL in
    autocommit is its own short transaction):
    1. take the committed outbox rows' source transactions in order of their largest
       order_sequence, whole, until max_rows rows (at least one transaction): a transaction
       that changed a key after another committed it wrote its outbox row later, so it
       comes later (invariant O8). They are found among the first max_rows rows (or twice
       as many, until one transaction lies wholly among them);
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
  v_window bigint;
  v_seen bigint;
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
{%- if ctx['capture'] == 'trigger' %}
  -- capture: trigger: a source table re-created (or altered) without setup has lost its
  -- triggers, and its writes are no longer captured. Readers call the mover at the head,
  -- so this is where a silent loss of events becomes an error.
  if (select pg_catalog.count(*) from pg_catalog.pg_trigger as t
       where t.tgrelid = pg_catalog.to_regclass({{ ctx['lit_source'] }}) and t.tgenabled <> 'D'
         and t.tgname = any (array[{{ changefeed._postgres_capture_trigger_literals(ctx) }}]::name[])) < 4
     and pg_catalog.to_regclass({{ ctx['lit_source'] }}) is not null then
    raise exception using errcode = 'CF011',
      message = 'changefeed: the source table ' || {{ ctx['lit_source'] }} || ' of the feed ' || {{ ctx['lit_feed'] }}
        || ' (capture: trigger) has lost its capture triggers or has them disabled: it was re-created or'
        || ' altered without running setup, and its writes since then are not in the feed',
      hint = 'Run `dbt run-operation changefeed.setup_feed` with the feed''s config to re-create the triggers;'
        || ' then re-emit the changes made meanwhile (for example update the affected rows).';
  end if;
{%- endif %}
  if not {{ q['lock_try'] }}(pg_catalog.hashtextextended({{ ctx['lit_mover_prefix'] }} || p_shard_id::text, 0),
                             {{ ctx['stall_timeout_ms'] }}, true) then
    return;
  end if;
  insert into {{ q['state'] }} as st (shard_id, time_ms, ulid_high, ulid_low, generation)
  values (cf.v_shard, 0, pg_catalog.decode('0000000000000000', 'hex'), 1, 0)
  on conflict do nothing;
  select st.time_ms, st.ulid_high, st.ulid_low into v_state
    from {{ q['state'] }} as st where st.shard_id = cf.v_shard for update;

  -- O8: in order of each transaction's largest order_sequence, a prefix of that order.
  -- The transactions whose rows all lie among the first v_window rows are exactly those
  -- whose largest order_sequence is at most the window's last one, so they are a prefix;
  -- found through the (shard_id, txid) index, without reading the rest of the outbox. A
  -- window that holds no whole transaction (a long one, interleaved) is doubled.
  v_window := cf.v_max_rows;
  loop
    with w as (select h.txid, h.order_sequence from {{ q['outbox'] }} as h
                where h.shard_id = cf.v_shard order by h.order_sequence limit cf.v_window),
         r as (select o.txid, pg_catalog.max(o.order_sequence) as last_sequence,
                      {{ changefeed._postgres_sql_epoch_ms('pg_catalog.max(o.time_hint)') }} as hint_ms,
                      pg_catalog.count(*) as n
                 from {{ q['outbox'] }} as o
                where o.shard_id = cf.v_shard and o.txid in (select w.txid from w)
                group by o.txid),
         t as (select r.txid, r.last_sequence, r.hint_ms, r.n,
                      pg_catalog.sum(r.n) over (order by r.last_sequence
                                                rows between unbounded preceding and current row) as running
                 from r
                where r.last_sequence <= (select pg_catalog.max(w.order_sequence) from w)),
         taken as (select t.txid, t.last_sequence, t.hint_ms, t.n from t
                    where t.running - t.n < cf.v_max_rows)
    select pg_catalog.array_agg(taken.txid order by taken.last_sequence),
           pg_catalog.array_agg(taken.hint_ms order by taken.last_sequence),
           pg_catalog.array_agg(taken.n order by taken.last_sequence),
           pg_catalog.sum(taken.n),
           (select pg_catalog.count(*) from w)
      into v_txids, v_hints, v_counts, v_total, v_seen
      from taken;
    exit when v_txids is not null or v_seen < v_window;
    v_window := v_window * 2;
  end loop;
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

  insert into {{ q['feed'] }} as f (shard_id, ulid, {{ ctx['key_list'] }}{{ ', row_image, row_deleted' if ctx['row_image'] else '' }})
  select o.shard_id,
         b.high || pg_catalog.int8send(b.start
           + (pg_catalog.row_number() over (partition by o.txid order by o.order_sequence)) - 1),
         {{ ctx['key_list_o'] }}{{ ', o.row_image, o.row_deleted' if ctx['row_image'] else '' }}
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
  {%- set columns = ctx['spec'].get('capture_columns') or [] -%}
  {%- set rows = [] -%}
  {%- set shown = [] -%}
  {%- set column_names = [] -%}
  {%- for c in columns -%}
    {%- do column_names.append(lit(c['name'])) -%}
    {%- do rows.append('(' ~ lit(c['name']) ~ '::name, ' ~ c['attnum'] ~ '::smallint, ' ~ c['typid'] ~ '::oid, '
                       ~ c['typmod'] ~ ', ' ~ c['collation'] ~ '::oid)') -%}
    {%- do shown.append(changefeed._postgres_ident(c['name']) ~ ' ' ~ c['type'] ~ ' (column ' ~ c['attnum'] ~ ')') -%}
  {%- endfor -%}
  {%- set body -%}
#variable_conflict use_column
begin
{%- if columns %}
  -- {{ changefeed._postgres_capture_identity(columns) }}
  -- The statements below were planned against these columns of the transition tables,
  -- and a plan over a transition table is not invalidated when the source's columns are
  -- renamed, swapped or retyped: it would read the wrong column. So every statement first
  -- checks that the captured columns (the key and those the shard expression names) still
  -- have the name, position, type and collation they had at setup (one indexed catalogue
  -- lookup per column, per statement).
  if (select pg_catalog.count(*) from pg_catalog.pg_attribute as a
       where a.attrelid = tg_relid and not a.attisdropped
         and (a.attname, a.attnum, a.atttypid, a.atttypmod, a.attcollation)
             in ({{ rows | join(', ') }})) <> {{ columns | length }} then
    raise exception using errcode = 'CF010',
      message = 'changefeed: the columns of ' || {{ ctx['lit_source'] }} || ' that the feed ' || {{ ctx['lit_feed'] }}
        || ' captures changed since setup (set up with ' || {{ lit(shown | join(', ')) }} || '; now '
        || coalesce((select pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' '
                              || pg_catalog.format_type(a.atttypid, a.atttypmod) || ' (column ' || a.attnum::text || ')',
                              ', ' order by a.attnum)
                       from pg_catalog.pg_attribute as a
                      where a.attrelid = tg_relid and not a.attisdropped and a.attnum > 0
                        and a.attname = any (array[{{ column_names | join(', ') }}]::name[])),
                    'none of them')
        || '); this write is refused so that no event carries a wrong key',
      hint = {{ lit("Run `dbt run-operation changefeed.setup_feed` with the feed's config (it re-creates the capture for the columns as they are now); if a key column's type changed, change it back, or tear the feed down and set it up again.") }};
  end if;
{%- endif %}
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
  {{ return(changefeed._postgres_definer_function(ctx['q']['capture'], 'trigger', body)) }}
{% endmacro %}


{#- `insert into <outbox> (shard_id, <keys>) select (<shard>), a.<keys> from <relation> as a
    [union select ...]`: the statement the capture trigger runs, over transition tables, and
    that setup runs over the source table (`where false`) to check the shard expression.
    The shard expression's columns are unqualified, so they resolve to the one relation of
    each select; the insert's assignment cast makes it an integer (text is refused). -#}
{% macro _postgres_sql_capture_insert(ctx, sources, where='') %}
  {%- if ctx['row_image'] -%}
    {{ return(changefeed._postgres_sql_capture_insert_images(ctx, sources, where)) }}
  {%- endif -%}
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


{#- The capture's insert with row_image (invariant O7): a new row (alias other than `o`)
    is written with its image, pg_catalog.to_jsonb of the row as the statement left it; an
    old row (`o`, of an UPDATE or DELETE) is a delete marker, unless the statement's new
    rows have the same shard and key (an update that keeps both: one event, with the new
    image). The row is `alias.*`: a bare `n` would mean the source's column n if it has
    one (a column comes before a whole-row reference), and the image would be its value. -#}
{% macro _postgres_sql_capture_insert_images(ctx, sources, where) %}
  {%- set parts = [] -%}
  {%- set gone = namespace(old=none, new=[]) -%}
  {%- for relation, alias in sources -%}
    {%- set keys = [] -%}
    {%- for key in ctx['spec']['keys'] -%}
      {%- do keys.append(alias ~ '.' ~ changefeed._postgres_ident(key['name'])) -%}
    {%- endfor -%}
    {%- set columns = '(' ~ ctx['shard'] ~ '), ' ~ keys | join(', ') -%}
    {%- set source = ' from ' ~ relation ~ ' as ' ~ alias ~ where -%}
    {%- if alias == 'o' -%}
      {%- set gone.old = 'select ' ~ columns ~ source -%}
    {%- else -%}
      {%- do parts.append('select ' ~ columns ~ ', pg_catalog.to_jsonb(' ~ alias ~ '.*), false' ~ source) -%}
      {%- do gone.new.append('select ' ~ columns ~ source) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if gone.old is not none -%}
    {%- do parts.append('select d.*, null::jsonb, true from (' ~ ([gone.old] + gone.new) | join(' except ') ~ ') as d') -%}
  {%- endif -%}
  {{ return('insert into ' ~ ctx['q']['outbox'] ~ ' (shard_id, ' ~ ctx['key_list'] ~ ', row_image, row_deleted)\n    '
            ~ parts | join('\n    union all\n    ')) }}
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
  {%- set event_trigger = changefeed._postgres_ident(names['recapture_trigger']) -%}
  {%- set event_trigger_exists = 'exists (select 1 from pg_catalog.pg_event_trigger where evtname = '
      ~ lit(names['recapture_trigger']) ~ ')' -%}
  {%- set lines = [] -%}
  {%- if ctx['capture'] != 'trigger' -%}
    {#- First: it depends on the recapture function, and would put the triggers back. -#}
    {%- do lines.append('  if ' ~ event_trigger_exists ~ ' then\n    execute '
        ~ lit('drop event trigger ' ~ event_trigger) ~ ';\n  end if;') -%}
  {%- endif -%}
  {%- do lines.append(changefeed._postgres_sql_capture_triggers(ctx, ctx['capture'] == 'trigger')) -%}
  {%- if ctx['capture'] == 'trigger' -%}
    {#- Event triggers need a superuser; without one, a re-created source table stays
        uncaptured until setup runs again, and reads fail with CF011 meanwhile. -#}
    {%- do lines.append('  if not ' ~ event_trigger_exists ~ ' and (select cf_role.rolsuper from pg_catalog.pg_roles as cf_role'
        ~ ' where cf_role.rolname = current_user) then\n    execute '
        ~ lit('create event trigger ' ~ event_trigger ~ ' on ddl_command_end when tag in ('
              ~ changefeed._postgres_recapture_tags() ~ ') execute function ' ~ ctx['q']['recapture'] ~ '()')
        ~ ';\n  end if;') -%}
  {%- endif -%}
  {#- mode none is teardown, which drops the functions with the other routines. -#}
  {%- if ctx['capture'] != 'trigger' and ctx['mode'] == 'outbox' -%}
    {%- for kind in ['recapture', 'capture'] -%}
      {%- do lines.append('  execute ' ~ lit('drop function if exists ' ~ ctx['schema'] ~ '.' ~ changefeed._postgres_ident(names[kind]) ~ '()') ~ ';') -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(lines | join('\n')) }}
{% endmacro %}


{#- The statements (PL/pgSQL) that create the missing capture triggers and, with
    `repair`, enable disabled ones (capture: trigger), or drop them (capture: none).
    Setup repairs; the event trigger only creates (a trigger disabled on purpose stays
    disabled, and reads report it, CF011). -#}
{% macro _postgres_sql_capture_triggers(ctx, repair) %}
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
      {%- if repair -%}
        {%- do lines.append('  if ' ~ exists[:-1] ~ " and t.tgenabled = 'D') then\n    execute "
            ~ lit('alter table ' ~ ctx['q_source'] ~ ' enable trigger ' ~ name) ~ ';\n  end if;') -%}
      {%- endif -%}
    {%- else -%}
      {%- do lines.append('  if ' ~ exists ~ ' then\n    execute ' ~ lit('drop trigger ' ~ name ~ ' on ' ~ ctx['q_source']) ~ ';\n  end if;') -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(lines | join('\n')) }}
{% endmacro %}


{#- The commands after which the event trigger looks at the source table: those that
    create a table under its name (also by renaming one to it). -#}
{% macro _postgres_recapture_tags() %}
  {{ return("'CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE'") }}
{% endmacro %}


{#- recapture:<feed>, the function of the event trigger of capture: trigger (protocol 5.1):
    at the end of a command that created or altered the source table, in the command's
    transaction, it creates the capture triggers the table lacks, so a source table
    re-created empty without setup is captured before any write to it commits. A table
    that lacks them and holds rows (created by CREATE TABLE AS or SELECT INTO, renamed
    into place, or one whose triggers were dropped) has rows no event records: the
    command is refused (CF011) instead. security definer: the user who re-creates the
    table need not be allowed to create triggers that call the capture function. -#}
{% macro _postgres_routine_recapture(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set relation_arg = changefeed._postgres_relation_arg(ctx['spec']) -%}
  {%- set body -%}
declare
  v_source regclass := pg_catalog.to_regclass({{ ctx['lit_source'] }});
begin
  if v_source is null
     or not exists (select 1 from pg_catalog.pg_event_trigger_ddl_commands() as c where c.objid = v_source)
     or (select pg_catalog.count(*) from pg_catalog.pg_trigger as t
          where t.tgrelid = v_source
            and t.tgname = any (array[{{ changefeed._postgres_capture_trigger_literals(ctx) }}]::name[]))
        = {{ changefeed._postgres_capture_trigger_kinds() | length }} then
    return;
  end if;
  if exists (select 1 from {{ ctx['q_source'] }} limit 1) then
    raise exception using errcode = 'CF011',
      message = 'changefeed: the source table ' || {{ ctx['lit_source'] }} || ' of the feed ' || {{ ctx['lit_feed'] }}
        || ' (capture: trigger) would hold rows that no event records: it is being created with rows (CREATE'
        || ' TABLE AS, SELECT INTO, a table renamed into its place, a dbt --full-refresh or rebuild of its model)'
        || ' or its capture triggers were dropped; this command is refused and rolled back',
      hint = {{ lit("A dbt model with a feed: never full-refresh it (set full_refresh: false on the model); if its table is gone, tear the feed down (dbt run-operation changefeed.teardown_feed --args '{relation: " ~ relation_arg ~ "}'), run the model again and full-refresh its consumers. Any other table: create it empty, then insert its rows (each becomes an event). Triggers dropped: run `dbt run-operation changefeed.setup_feed` with the feed's config and re-emit the changes made meanwhile.") }};
  end if;
{{ changefeed._postgres_sql_capture_triggers(ctx, false) }}
end
  {%- endset -%}
  {{ return(changefeed._postgres_definer_function(ctx['q']['recapture'], 'event_trigger', body)) }}
{% endmacro %}


{#- True when capture: trigger and the source table lacks one of its capture triggers (or
    has it disabled), or the capture function was generated for other columns (the source
    was altered or re-created since setup). -#}
{% macro _postgres_capture_needs_repair(ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return(false) }}
  {%- endif -%}
  {%- set identity = changefeed._postgres_capture_identity(ctx['spec'].get('capture_columns') or []) -%}
  {%- set found = changefeed._postgres_query_json(
      "select pg_catalog.json_build_object('n', (select pg_catalog.count(*) from pg_catalog.pg_trigger as t"
      ~ " where t.tgrelid = pg_catalog.to_regclass(" ~ ctx['lit_source'] ~ ") and t.tgenabled <> 'D'"
      ~ " and t.tgname = any (array[" ~ changefeed._postgres_capture_trigger_literals(ctx) ~ "]::text[])),"
      ~ " 'same', coalesce((select pg_catalog.strpos(p.prosrc, " ~ changefeed._postgres_literal(identity) ~ ") > 0"
      ~ " from pg_catalog.pg_proc as p where p.oid = pg_catalog.to_regprocedure("
      ~ changefeed._postgres_literal(ctx['q']['capture'] ~ '()') ~ ")), false))") -%}
  {{ return(found['n'] != changefeed._postgres_capture_trigger_kinds() | length or not found['same']) }}
{% endmacro %}


{#- The columns a capture: trigger feed captures (its key, and the source columns named in
    its shard expression) as the catalogue has them now: [{name, attnum, typid, typmod,
    collation, type}]. The capture function checks them on every statement (CF010). -#}
{% macro _postgres_capture_columns(spec) %}
  {%- if spec.get('capture') != 'trigger' -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set source = changefeed._postgres_ident(spec['source_schema']) ~ '.' ~ changefeed._postgres_ident(spec['source_table']) -%}
  {%- set all = changefeed._postgres_query_json("
    select pg_catalog.json_agg(pg_catalog.json_build_object(
             'name', a.attname, 'attnum', a.attnum, 'typid', a.atttypid, 'typmod', a.atttypmod,
             'collation', a.attcollation, 'type', pg_catalog.format_type(a.atttypid, a.atttypmod))
           order by a.attnum)
      from pg_catalog.pg_attribute as a
     where a.attrelid = pg_catalog.to_regclass(" ~ changefeed._postgres_literal(source) ~ ")
       and a.attnum > 0 and not a.attisdropped") or [] -%}
  {#- Identifiers of the shard expression: "quoted" as written, plain ones folded to lower case. -#}
  {%- set named = [] -%}
  {%- for quoted, plain in modules.re.findall('"((?:[^"]|"")*)"|([A-Za-z_][A-Za-z0-9_$]*)', spec.get('shard') or '') -%}
    {%- do named.append(quoted.replace('""', '"') if quoted else plain.lower()) -%}
  {%- endfor -%}
  {%- set keys = spec['keys'] | map(attribute='name') | list -%}
  {{ return(all | selectattr('name', 'in', keys + named) | list) }}
{% endmacro %}


{#- The capture trigger names as a list of literals (for an array[...]). -#}
{% macro _postgres_capture_trigger_literals(ctx) %}
  {%- set names = [] -%}
  {%- for kind in changefeed._postgres_capture_trigger_kinds() -%}
    {%- do names.append(changefeed._postgres_literal(ctx['capture_names'][kind])) -%}
  {%- endfor -%}
  {{ return(names | join(', ')) }}
{% endmacro %}


{#- The comment line that identifies the columns a capture function was generated for. -#}
{% macro _postgres_capture_identity(columns) %}
  {%- set parts = [] -%}
  {%- for c in columns -%}
    {%- do parts.append(c['attnum'] ~ ':' ~ c['typid'] ~ ':' ~ c['typmod'] ~ ':' ~ c['collation'] ~ ':' ~ tojson(c['name'])) -%}
  {%- endfor -%}
  {{ return('captured columns: ' ~ parts | join(' ')) }}
{% endmacro %}
