{#-
  Retention (protocol section 8.1): the retention and consumer tables, the routines that
  remove old events (retain), register a consumer's cursor (save_cursor, forget_consumer),
  the check that makes a reader below the removed events fail (CF013), and
  postgres__apply_retention, the dbt operation.

  Contract: postgres__apply_retention returns a list with one mapping per shard it looked
  at, in shard order: {shard_id, removed, horizon, held_for_consumers, slowest_consumer}
  (horizon the newest removed ULID as 32 hex digits, none if nothing was ever removed;
  slowest_consumer none without registered consumers), and none when dbt is only parsing.
-#}


{#- The dbt operation: runs retain:<feed> once and logs one line per shard. Options are
    checked here (an integer, not negative; at least one policy) before any SQL runs. -#}
{% macro postgres__apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_identity(changefeed._feed_relation(relation)) -%}
  {%- do changefeed._feed_retention_policy_check(max_age_seconds, keep_last, override_consumers, shard) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- if row is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is not set up, so it has no events to remove;"
        ~ " check the relation, or set it up with `dbt run-operation changefeed.setup_feed`") }}
  {%- endif -%}
  {%- if 'retain' not in row['names'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a package without retention;"
        ~ " run `dbt run-operation changefeed.upgrade_feed` with its config first (it adds the retention"
        ~ " routines and tables and keeps the data)") }}
  {%- endif -%}
  {%- set retain = changefeed._postgres_ident(spec['schema']) ~ '.' ~ changefeed._postgres_ident(row['names']['retain']) -%}
  {%- set sql = "select coalesce(pg_catalog.json_agg(pg_catalog.json_build_object("
      ~ "'shard_id', r.shard_id, 'removed', r.removed, 'horizon', pg_catalog.encode(r.horizon, 'hex'),"
      ~ " 'held_for_consumers', r.held_for_consumers, 'slowest_consumer', r.slowest_consumer) order by r.shard_id), '[]')"
      ~ " from " ~ retain ~ "("
      ~ (max_age_seconds * 1000 if max_age_seconds is not none else 'null') ~ "::bigint, "
      ~ (keep_last if keep_last is not none else 'null') ~ "::bigint, "
      ~ ('true' if override_consumers else 'false') ~ ", "
      ~ (shard if shard is not none else 'null') ~ "::integer) as r" -%}
  {#- One statement in dbt's transaction, committed here (run-operation commits nothing). -#}
  {%- call statement('changefeed_retention', fetch_result=true, auto_begin=true) -%}
    select ({{ sql }})::text as cf_json
  {%- endcall -%}
  {%- set result = fromjson(load_result('changefeed_retention')['data'][0][0]) -%}
  {%- do adapter.commit() -%}
  {%- do changefeed._feed_retention_log(spec, result) -%}
  {{ return(result) }}
{% endmacro %}


{#- DDL of the retention table (per shard: the newest removed ULID, the horizon) and the
    consumer table (registered cursors), for a new feed and for the sync below. -#}
{% macro _postgres_retention_tables_statements(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set ident = changefeed._postgres_ident -%}
  {%- set reader = ident(ctx['n']['reader_role']) -%}
  {{ return([
    'create table ' ~ q['retention'] ~ ' (
  shard_id integer not null,
  horizon bytea not null check (pg_catalog.octet_length(horizon) = 16),
  removed bigint not null,
  updated_at timestamptz not null,
  constraint ' ~ ident(ctx['n']['retention_pk']) ~ ' primary key (shard_id)
)',
    'create table ' ~ q['consumer'] ~ ' (
  consumer text not null check (pg_catalog.length(consumer) between 1 and 200),
  shard_id integer not null,
  "cursor" bytea not null check (pg_catalog.octet_length("cursor") = 16),
  updated_at timestamptz not null,
  constraint ' ~ ident(ctx['n']['consumer_pk']) ~ ' primary key (consumer, shard_id)
)',
    'grant select on ' ~ q['retention'] ~ ' to ' ~ reader,
    'grant select on ' ~ q['consumer'] ~ ' to ' ~ reader,
  ]) }}
{% endmacro %}


{#- PL/pgSQL for setup and upgrade: create the retention and consumer tables of a feed set
    up by a package without retention. -#}
{% macro _postgres_sql_retention_sync(ctx) %}
  if pg_catalog.to_regclass({{ changefeed._postgres_literal(ctx['q']['retention']) }}) is null then
{{ changefeed._postgres_execute_all(changefeed._postgres_retention_tables_statements(ctx)) }}
  end if;
{%- endmacro %}


{#- PL/pgSQL for read_feed: a cursor below the shard's retention horizon (the newest event
    retention removed) has missed that event, so the read fails with CF013 instead of
    skipping it (protocol 8.1, C5). Expects v_shard and v_cursor. -#}
{% macro _postgres_sql_retention_check(ctx) %}
  if exists (select 1 from {{ ctx['q']['retention'] }} as rt
              where rt.shard_id = cf.v_shard and rt.horizon > cf.v_cursor) then
    raise exception using errcode = 'CF013',
      message = 'changefeed: a reader of ' || {{ ctx['lit_feed'] }} || ' shard ' || cf.v_shard::text
        || ' fell behind retention: its cursor ' || pg_catalog.encode(cf.v_cursor, 'hex')
        || ' lies below events that retention removed (up to '
        || (select pg_catalog.encode(rt.horizon, 'hex') from {{ ctx['q']['retention'] }} as rt where rt.shard_id = cf.v_shard)
        || '), so it cannot continue without skipping them',
      hint = 'Re-snapshot: copy the source table again and continue from the shard''s current safe point'
        || ' (docs/operations.md, Retention); register the new cursor with save_cursor so that retention keeps'
        || ' the events it has not read.';
  end if;
{%- endmacro %}


{#- retain:<feed>(max_age_ms, keep_last, override_consumers, shard_id) -> per shard
    (shard_id, removed, horizon, held_for_consumers, slowest_consumer): protocol 8.1.
    Removes the shard's events at or below its safe point that no keep rule keeps: an
    event is kept if it is younger than max_age_ms (by its ULID's time), or in the block of
    one of the newest keep_last events (a null rule keeps nothing by itself; at least one
    must be given), or, unless override_consumers, above a registered consumer's cursor (a
    consumer without a cursor for the shard keeps all of it). Serialised per feed by a
    transaction advisory lock; the horizon only grows. Owner only: nothing is granted. -#}
{% macro _postgres_routine_retain(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_shard integer;
  v_safe bytea;
  v_age_limit bytea;
  v_keep_limit bytea;
  v_nth bytea;
  v_cut_ms bigint;
  v_min_cursor bytea;
  v_slowest text;
  v_policy bigint;
  v_removed bigint;
  v_max bytea;
begin
  if p_max_age_ms is null and p_keep_last is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: retain on ' || {{ ctx['lit_feed'] }} || ' needs a policy: max_age_ms and/or keep_last';
  end if;
  if p_max_age_ms < 0 or p_keep_last < 0 or p_override_consumers is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: retain on ' || {{ ctx['lit_feed'] }} || ': max_age_ms and keep_last must not be negative,'
        || ' and override_consumers must be true or false';
  end if;
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended({{ ctx['lit_lock_prefix'] }} || 'retention', 0));
  if p_max_age_ms is not null then
    v_cut_ms := {{ changefeed._postgres_sql_epoch_ms('pg_catalog.clock_timestamp()') }} OPERATOR(pg_catalog.-) p_max_age_ms;
    v_age_limit := case when v_cut_ms <= 0 then pg_catalog.decode('00000000000000000000000000000000', 'hex')
                        else pg_catalog.substr(pg_catalog.int8send(least(v_cut_ms, {{ ctx['max_ms'] }})), 3, 6)
                             || pg_catalog.decode('00000000000000000000', 'hex') end;
  end if;
  for v_shard in select st.shard_id from {{ q['state'] }} as st
                  where p_shard_id is null or st.shard_id = p_shard_id order by 1 loop
    select sp.safe_point into v_safe from {{ q['safe_point'] }}(cf.v_shard) as sp;
    v_keep_limit := null;
    if p_keep_last is not null and p_keep_last > 0 then
      v_nth := null;
      select f.ulid into v_nth from {{ q['feed'] }} as f
       where f.shard_id = cf.v_shard and f.ulid <= cf.v_safe
       order by f.ulid desc offset p_keep_last - 1 limit 1;
      -- Fewer than keep_last events: keep them all. Else keep the N-th newest's whole block,
      -- so that no transaction loses its older events.
      v_keep_limit := case when v_nth is null then pg_catalog.decode('00000000000000000000000000000000', 'hex')
                           else {{ changefeed._postgres_sql_block_edge('cf.v_nth', ctx['block_bits'], false) }} end;
    end if;
    v_min_cursor := null;
    v_slowest := null;
    select c.consumer, coalesce(k."cursor", pg_catalog.decode('00000000000000000000000000000000', 'hex'))
      into v_slowest, v_min_cursor
      from (select distinct cc.consumer from {{ q['consumer'] }} as cc) as c
      left join {{ q['consumer'] }} as k on k.consumer = c.consumer and k.shard_id = cf.v_shard
     order by 2, 1 limit 1;
    select pg_catalog.count(*) into v_policy from {{ q['feed'] }} as f
     where f.shard_id = cf.v_shard and f.ulid <= cf.v_safe
       and (cf.v_age_limit is null or f.ulid < cf.v_age_limit)
       and (cf.v_keep_limit is null or f.ulid < cf.v_keep_limit);
    with d as (
      delete from {{ q['feed'] }} as f
       where f.shard_id = cf.v_shard and f.ulid <= cf.v_safe
         and (cf.v_age_limit is null or f.ulid < cf.v_age_limit)
         and (cf.v_keep_limit is null or f.ulid < cf.v_keep_limit)
         and (p_override_consumers or cf.v_min_cursor is null or f.ulid <= cf.v_min_cursor)
      returning f.ulid)
    -- No max(bytea) before PostgreSQL 17: the newest removed ULID by order.
    select (select pg_catalog.count(*) from d), (select d.ulid from d order by d.ulid desc limit 1)
      into v_removed, v_max;
    if v_removed > 0 then
      insert into {{ q['retention'] }} as rt (shard_id, horizon, removed, updated_at)
      values (cf.v_shard, cf.v_max, cf.v_removed, pg_catalog.clock_timestamp())
      on conflict on constraint {{ changefeed._postgres_ident(ctx['n']['retention_pk']) }} do update
        set horizon = greatest(rt.horizon, excluded.horizon),
            removed = rt.removed OPERATOR(pg_catalog.+) excluded.removed,
            updated_at = excluded.updated_at;
    end if;
    shard_id := v_shard;
    removed := v_removed;
    horizon := (select rt.horizon from {{ q['retention'] }} as rt where rt.shard_id = cf.v_shard);
    held_for_consumers := v_policy OPERATOR(pg_catalog.-) v_removed;
    slowest_consumer := v_slowest;
    return next;
  end loop;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['retain'] ~ '(
  p_max_age_ms bigint,
  p_keep_last bigint,
  p_override_consumers boolean default false,
  p_shard_id integer default null)
returns table (shard_id integer, removed bigint, horizon bytea, held_for_consumers bigint, slowest_consumer text)
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- save_cursor:<feed>(consumer, shard_id, cursor): registers (or moves) a consumer's
    cursor, which retention will not pass (protocol 8.1). A consumer calls it after it has
    stored its output and cursor durably. A cursor below the retention horizon fails with
    CF013: that consumer already missed events. -#}
{% macro _postgres_routine_save_cursor(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
<<cf>>
declare
  v_shard integer := p_shard_id;
  v_cursor bytea := p_cursor;
begin
  if p_consumer is null or pg_catalog.length(p_consumer) < 1 or pg_catalog.length(p_consumer) > 200 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: save_cursor on ' || {{ ctx['lit_feed'] }} || ' needs a consumer name of 1 to 200 characters';
  end if;
{{ changefeed._postgres_sql_require_shard(ctx, 'save_cursor') }}
  if p_cursor is null or pg_catalog.length(p_cursor) <> 16 then
    raise exception using errcode = 'CF007',
      message = 'changefeed: save_cursor on ' || {{ ctx['lit_feed'] }} || ': the cursor must be 16 bytes (16 zero bytes for the beginning)';
  end if;
{{ changefeed._postgres_sql_retention_check(ctx) }}
  insert into {{ q['consumer'] }} as k (consumer, shard_id, "cursor", updated_at)
  values (p_consumer, cf.v_shard, cf.v_cursor, pg_catalog.clock_timestamp())
  on conflict on constraint {{ changefeed._postgres_ident(ctx['n']['consumer_pk']) }} do update
    set "cursor" = excluded."cursor", updated_at = excluded.updated_at;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['save_cursor'] ~ '(p_consumer text, p_shard_id integer, p_cursor bytea)
returns void
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- forget_consumer:<feed>(consumer) -> rows: unregisters a consumer (every shard), so that
    retention no longer keeps events for it. -#}
{% macro _postgres_routine_forget_consumer(ctx) %}
  {%- set body -%}
declare
  v_rows integer;
begin
  if p_consumer is null then
    raise exception using errcode = 'CF007',
      message = 'changefeed: forget_consumer on ' || {{ ctx['lit_feed'] }} || ' needs a consumer name, not null';
  end if;
  delete from {{ ctx['q']['consumer'] }} as k where k.consumer = p_consumer;
  get diagnostics v_rows = row_count;
  return v_rows;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ ctx['q']['forget_consumer'] ~ '(p_consumer text)
returns integer
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
