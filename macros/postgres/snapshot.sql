{#-
  Snapshots (protocol section 12): the request table snapshot:<feed>, snapshot_begin (reserve
  one empty block in a shard and record the request) and snapshot_finish (mark it done), and
  the sync that gives a feed set up before snapshots these objects. The landing executes the
  requests (python/changefeed/spark/landing/_snapshot.py).
-#}


{#- DDL of the request table, for a new feed and for the sync below. -#}
{% macro _postgres_snapshot_tables_statements(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set ident = changefeed._postgres_ident -%}
  {{ return([
    'create table ' ~ q['snapshot'] ~ ' (
  snapshot_id bigint not null,
  shard_id integer not null,
  first_ulid bytea not null check (pg_catalog.octet_length(first_ulid) = 16),
  last_ulid bytea not null check (pg_catalog.octet_length(last_ulid) = 16),
  key_from text,
  key_to text,
  requested_at timestamptz not null,
  finished_at timestamptz,
  rows_landed bigint,
  constraint ' ~ ident(ctx['n']['snapshot_pk']) ~ ' primary key (snapshot_id)
)',
    'grant select on ' ~ q['snapshot'] ~ ' to ' ~ ident(ctx['n']['reader_role']),
  ]) }}
{% endmacro %}


{#- PL/pgSQL for setup and upgrade: create the request table of a feed set up by a package
    without snapshots (its routines come with the other routines). -#}
{% macro _postgres_sql_snapshot_sync(ctx) %}
  if pg_catalog.to_regclass({{ changefeed._postgres_literal(ctx['q']['snapshot']) }}) is null then
{{ changefeed._postgres_execute_all(changefeed._postgres_snapshot_tables_statements(ctx)) }}
  end if;
{%- endmacro %}


{#- PL/pgSQL: refuse a key bound that is not null or a JSON array of one scalar per key
    column (protocol 12.1), naming the accepted form, or whose value is not one of its key
    column's type: the landing compares the key with it, so a request with such a bound
    could never run. Each value is assigned to a variable of the feed table's key column
    type (v_key<i>, %type: the type as setup created it, whatever this routine's
    search_path), which reads it as that type's input does. -#}
{% macro _postgres_sql_snapshot_key_check(ctx, arg, name) %}
  {%- set keys = ctx['spec']['keys'] | map(attribute='name') | list -%}
  {%- set form = 'a JSON array of ' ~ keys | length ~ ' value' ~ ('s' if keys | length != 1 else '')
      ~ ' (the key ' ~ keys | join(', ') ~ ')' -%}
  if {{ arg }} is not null then
    begin
      v_json := {{ arg }}::jsonb;
    exception when others then
      v_json := null;
    end;
    if v_json is null or pg_catalog.jsonb_typeof(v_json) <> 'array'
       or pg_catalog.jsonb_array_length(v_json) <> {{ keys | length }}
       or exists (select 1 from pg_catalog.jsonb_array_elements(v_json) as e (v)
                   where pg_catalog.jsonb_typeof(e.v) not in ('number', 'string', 'boolean')) then
      raise exception using errcode = 'CF007',
        message = 'changefeed: snapshot_begin on ' || {{ ctx['lit_feed'] }} || ': {{ name }} must be null or '
          || {{ changefeed._postgres_literal(form) }} || ', got ' || {{ arg }};
    end if;
{%- for key in ctx['spec']['keys'] %}
    begin
      v_key{{ loop.index0 }} := v_json ->> {{ loop.index0 }};
    exception when data_exception then
      raise exception using errcode = 'CF007',
        message = 'changefeed: snapshot_begin on ' || {{ ctx['lit_feed'] }} || ': {{ name }}''s value '
          || (v_json -> {{ loop.index0 }})::text || ' does not fit the key column '
          || {{ changefeed._postgres_literal(key['name'] ~ ' (' ~ key['data_type'] ~ ')') }}
          || ', so the landing could not compare the key with it; got ' || {{ arg }};
    end;
{%- endfor %}
  end if;
{%- endmacro %}


{#- snapshot_begin:<feed>(shard_id, key_from, key_to) -> (snapshot_id, first_ulid): protocol
    12.1. The block is allocated under the state row's lock only, the lock every allocation
    takes (A1), so no shard or mover lock is needed and the reader role never waits for a
    writer's transaction; it is committed empty, with the request row. -#}
{% macro _postgres_routine_snapshot_begin(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set block = ctx['block'] -%}
  {%- set body -%}
<<cf>>
declare
  v_shard integer := p_shard_id;
  v_json jsonb;
{%- for key in ctx['spec']['keys'] %}
  v_key{{ loop.index0 }} {{ q['feed'] }}.{{ changefeed._postgres_ident(key['name']) }}%type;
{%- endfor %}
  v_state record;
  v_ms bigint;
  v_high bytea;
  v_start bigint;
  v_rand bytea;
  v_fresh boolean;
  v_id bigint;
begin
{{ changefeed._postgres_sql_require_shard(ctx, 'snapshot_begin') }}
{{ changefeed._postgres_sql_snapshot_key_check(ctx, 'p_key_from', 'key_from') }}
{{ changefeed._postgres_sql_snapshot_key_check(ctx, 'p_key_to', 'key_to') }}
  insert into {{ q['state'] }} as st (shard_id, time_ms, ulid_high, ulid_low, generation)
  values (cf.v_shard, 0, pg_catalog.decode('0000000000000000', 'hex'), 1, 0)
  on conflict do nothing;
  select st.time_ms, st.ulid_high, st.ulid_low into v_state
    from {{ q['state'] }} as st where st.shard_id = cf.v_shard for update;
  v_ms := v_state.time_ms;
  v_high := v_state.ulid_high;
{{ changefeed._postgres_sql_next_block(ctx, 'p_shard_id',
     changefeed._postgres_sql_epoch_ms('pg_catalog.clock_timestamp()'),
     'v_ms', 'v_high', 'v_state.ulid_low', 'v_start', 'v_rand', 'v_fresh') }}
  update {{ q['state'] }} as st
     set time_ms = cf.v_ms, ulid_high = cf.v_high, ulid_low = cf.v_start + {{ block }}
   where st.shard_id = cf.v_shard;
  v_id := pg_catalog.nextval({{ ctx['lit_sequence'] }}::pg_catalog.regclass);
  insert into {{ q['snapshot'] }} as sn
    (snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at, finished_at, rows_landed)
  values (cf.v_id, cf.v_shard, cf.v_high || pg_catalog.int8send(cf.v_start),
          cf.v_high || pg_catalog.int8send(cf.v_start + {{ block - 1 }}),
          p_key_from, p_key_to, pg_catalog.clock_timestamp(), null, null);
  snapshot_id := v_id;
  first_ulid := v_high || pg_catalog.int8send(v_start);
  return next;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['snapshot_begin'] ~ '(p_shard_id integer, p_key_from text default null, p_key_to text default null)
returns table (snapshot_id bigint, first_ulid bytea)
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- snapshot_finish:<feed>(snapshot_id, rows_landed) -> boolean: protocol 12.1. True when
    this call finished the request, false when it was finished before. -#}
{% macro _postgres_routine_snapshot_finish(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
  if p_snapshot_id is null or p_rows_landed is null or p_rows_landed < 0 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: snapshot_finish on ' || {{ ctx['lit_feed'] }}
        || ' needs a snapshot_id and rows_landed (a count, 0 or more)';
  end if;
  update {{ q['snapshot'] }} as sn set finished_at = pg_catalog.clock_timestamp(), rows_landed = p_rows_landed
   where sn.snapshot_id = p_snapshot_id and sn.finished_at is null;
  if found then
    return true;
  end if;
  if not exists (select 1 from {{ q['snapshot'] }} as sn where sn.snapshot_id = p_snapshot_id) then
    raise exception using errcode = 'CF007',
      message = 'changefeed: snapshot_finish on ' || {{ ctx['lit_feed'] }} || ': no snapshot request '
        || p_snapshot_id::text || ' (see the table ' || {{ changefeed._postgres_literal(q['snapshot']) }} || ')';
  end if;
  return false;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['snapshot_finish'] ~ '(p_snapshot_id bigint, p_rows_landed bigint)
returns boolean
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- PL/pgSQL for setup run again with an unchanged config (which otherwise keeps every
    routine): a feed set up by a package without snapshots gets the request table, the two
    routines, their grants and their names in the registry. -#}
{% macro _postgres_sql_snapshot_add(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set reader = changefeed._postgres_ident(ctx['n']['reader_role']) -%}
  {%- set statements = changefeed._postgres_snapshot_tables_statements(ctx) -%}
  {%- for kind in ['snapshot_begin', 'snapshot_finish'] -%}
    {%- do statements.extend([changefeed.get('_postgres_routine_' ~ kind)(ctx),
                              'revoke all on function ' ~ q[kind] ~ ' from public',
                              'grant execute on function ' ~ q[kind] ~ ' to ' ~ reader]) -%}
  {%- endfor -%}
  if pg_catalog.to_regclass({{ changefeed._postgres_literal(q['snapshot']) }}) is null then
{{ changefeed._postgres_execute_all(statements) }}
    update {{ ctx['schema'] }}.feeds as f
       set names = {{ changefeed._postgres_literal(tojson(ctx['n'])) }}::jsonb, updated_at = pg_catalog.now()
     where f.feed_id = {{ ctx['lit_feed'] }};
  end if;
{%- endmacro %}


{#- The dbt operation (macros/request_snapshot.sql): checks the arguments against the
    registry's key, refuses a shard other than the feed's only one when the writers' shard
    rule is unknown (no capture: trigger shard expression, protocol 12.3 "Shards"), calls
    snapshot_begin and commits. Returns {snapshot_id, shard_id, first_ulid (32 hex digits)}. -#}
{% macro postgres__request_snapshot(relation, shard, key_from, key_to) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_identity(changefeed._feed_relation(relation)) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- if row is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is not set up, so there is nothing to snapshot;"
        ~ " check the relation, or set it up with `dbt run-operation changefeed.setup_feed`") }}
  {%- endif -%}
  {%- set bounds = changefeed._feed_snapshot_arguments(shard, key_from, key_to, row['keys'] | map(attribute='name') | list) -%}
  {%- if 'snapshot_begin' not in row['names'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a package without snapshots;"
        ~ " run `dbt run-operation changefeed.upgrade_feed` with its config first (it adds the snapshot"
        ~ " table and routines and keeps the data)") }}
  {%- endif -%}
  {%- set q = changefeed._postgres_ident(spec['schema']) ~ '.' -%}
  {%- set options = row['options'] or {} -%}
  {%- if not (options.get('capture') == 'trigger' and options.get('shard')) -%}
    {%- set others = changefeed._postgres_query_json(
        "select coalesce(pg_catalog.json_agg(s.shard_id order by s.shard_id), '[]') from "
        ~ q ~ changefeed._postgres_ident(row['names']['shards']) ~ "() as s where s.shard_id <> " ~ shard) -%}
    {%- if others -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: the feed " ~ spec['feed_id'] ~ " has events in shard(s) " ~ others | join(', ')
          ~ " besides " ~ shard ~ ", and its writers choose shards by a rule the database does not know"
          ~ " (no capture: trigger with a shard expression), so a snapshot of shard " ~ shard
          ~ " would give other shards' keys a second history; snapshots support single-shard feeds and"
          ~ " capture: trigger feeds with a shard expression") }}
    {%- endif -%}
  {%- endif -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- call statement('changefeed_snapshot', fetch_result=true, auto_begin=true) -%}
    select pg_catalog.json_build_object('snapshot_id', s.snapshot_id, 'shard_id', {{ shard }},
             'first_ulid', pg_catalog.encode(s.first_ulid, 'hex'))::text as cf_json
      from {{ q ~ changefeed._postgres_ident(row['names']['snapshot_begin']) }}({{ shard }},
             {{ lit(bounds[0]) if bounds[0] is not none else 'null' }},
             {{ lit(bounds[1]) if bounds[1] is not none else 'null' }}) as s
  {%- endcall -%}
  {%- set result = fromjson(load_result('changefeed_snapshot')['data'][0][0]) -%}
  {%- do adapter.commit() -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " shard " ~ shard ~ ": snapshot " ~ result['snapshot_id']
             ~ " requested (block " ~ result['first_ulid'] ~ "); the next landing of the feed executes it", info=true) -%}
  {{ return(result) }}
{% endmacro %}
