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
