{#-
  Upgrading a feed to this package's protocol version (protocol section 10):
  postgres__upgrade_feed and the one DO statement that re-creates the feed's routines and
  their grants under the setup lock, keeping tables, data, roles and table grants.

  Contract: postgres__upgrade_feed returns 'upgraded' (or fails with an error naming the
  remedy), and none when dbt is only parsing (execute is false).
-#}


{#- Options are validated once, adapter-neutrally, by _feed_build_spec (macros/_feed/). -#}
{% macro postgres__upgrade_feed(relation, options) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(relation, options, changefeed._postgres_key_columns) -%}
  {{ return(changefeed._postgres_upgrade_feed(spec)) }}
{% endmacro %}


{#-
  Re-creates a feed's functions and procedures (and their grants) from this package's
  code; tables, data, roles and table grants are kept. The mode, key, capture and shard
  must match the registry. Updates the registry's protocol version, options and names.
  Returns 'upgraded'.
-#}
{% macro _postgres_upgrade_feed(spec) %}
  {%- do spec.update({'capture_columns': changefeed._postgres_capture_columns(spec)}) -%}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set signature = changefeed._postgres_key_signature(spec['keys']) -%}
  {%- set options = changefeed._postgres_feed_options(spec) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- if row is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is not set up, so there is nothing to upgrade;"
        ~ " run `dbt run-operation changefeed.setup_feed --args '{relation: "
        ~ changefeed._postgres_relation_arg(spec) ~ ", mode: " ~ spec['mode'] ~ "}'`") }}
  {%- endif -%}
  {%- do changefeed._postgres_check_registered(spec, row, signature, options, 'upgrade') -%}
  {#- An upgrade run with the old arguments must not switch capture off (writers would stop
      producing events) nor row images: capture, shard and row_image change through
      setup_feed only. -#}
  {%- if (row['options'].get('row_image') or false) != ctx['row_image'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is registered with row_image: "
        ~ ((row['options'].get('row_image') or false) | string | lower) ~ ", but upgrade_feed was given row_image: "
        ~ (ctx['row_image'] | string | lower) ~ ". upgrade_feed keeps it: pass the registered row_image, or change it with setup_feed") }}
  {%- endif -%}
  {%- set registered = [row['options'].get('capture', 'none'), row['options'].get('shard')] -%}
  {%- if registered != [ctx['capture'], ctx['shard']] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is registered with capture: " ~ registered[0]
        ~ (", shard: " ~ registered[1] if registered[1] is not none else '') ~ ", but upgrade_feed was given capture: "
        ~ ctx['capture'] ~ (", shard: " ~ ctx['shard'] if ctx['shard'] is not none else '')
        ~ ". upgrade_feed keeps them: pass the registered capture and shard, or change them with setup_feed") }}
  {%- endif -%}
  {%- do changefeed._postgres_run_ddl(changefeed._postgres_sql_upgrade(spec, ctx, signature, options)) -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " upgraded to protocol version " ~ spec['protocol_version'], info=true) -%}
  {{ return('upgraded') }}
{% endmacro %}


{#-
  The upgrade statement: under the setup lock, re-check the registry (a feed torn down or
  set up again meanwhile fails with CF008), abandon pending writes of a protocol 1 lock
  call (blocking), re-create the routines and their grants, sync the capture triggers and
  update the registry row. Pure: it runs no query, so tests can render it.
-#}
{% macro _postgres_sql_upgrade(spec, ctx, signature, options) %}
  {%- set registry = ctx['schema'] ~ '.feeds' -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set body -%}
<<cf>>
declare
  r record;
begin
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('changefeed/setup', 0));
  select f.mode, f.key_signature, f.protocol_version into r from {{ registry }} as f where f.feed_id = {{ ctx['lit_feed'] }};
  if not found or r.mode <> {{ lit(spec['mode']) }} or r.key_signature <> {{ lit(signature) }} then
    raise exception using errcode = 'CF008',
      message = 'changefeed: the feed ' || {{ ctx['lit_feed'] }} || ' changed while it was being upgraded; run upgrade_feed again';
  end if;
{%- if spec['mode'] == 'blocking' %}
  -- A write whose lock call ran protocol 1 allocated its block without moving the state row
  -- (its update_state did that); protocol 2's update_state does not, so such a write would
  -- commit events the next writer's block could overlap. Abandon it: it fails with CF001
  -- and is retried under protocol 2. (Upgrade while writers are quiet: a protocol 1 lock
  -- call still running when this commits is not covered.)
  if r.protocol_version < 2 then
    update {{ ctx['q']['session'] }} as se set state = 2, finished_at = pg_catalog.clock_timestamp()
     where se.state = 0;
  end if;
{%- endif %}
{#- `create or replace` (not drop + create): calls running during the upgrade finish on the
    old body. A future protocol version that changes a routine's signature must drop that
    routine explicitly here. -#}
{{ changefeed._postgres_sql_constraints_sync(ctx) }}{{ changefeed._postgres_sql_row_image_sync(ctx) }}
{{ changefeed._postgres_sql_retention_sync(ctx) }}
{{ changefeed._postgres_sql_snapshot_sync(ctx) }}
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_execute_all(changefeed._postgres_routine_statements(ctx)
     + changefeed._postgres_grants_statements(ctx, routines_only=true)) }}
{{ changefeed._postgres_sql_guard_sync(ctx) }}
{{ changefeed._postgres_sql_capture_sync(ctx) }}
  update {{ registry }} as f
     set protocol_version = {{ spec['protocol_version'] }}, options = {{ lit(tojson(options)) }}::jsonb,
         names = {{ lit(tojson(ctx['n'])) }}::jsonb, updated_at = pg_catalog.now()
   where f.feed_id = {{ ctx['lit_feed'] }};
end
  {%- endset -%}
  {{ return('do ' ~ changefeed._postgres_dollar_quote(body, 'cfupgrade')) }}
{% endmacro %}
