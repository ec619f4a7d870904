{#-
  One DO statement that sets up a feed, all or nothing (protocol section 10, D1/D2): it
  takes the setup lock (a transaction advisory lock), creates the registry if missing,
  then re-checks the registry under the lock, so that a concurrent setup that won the
  race turns this one into a no-op (or an error if it registered a different mode or
  key). A changed option re-creates the routines. Being one statement, it is atomic even
  on an autocommit connection; inside a model's transaction it commits with the model.
-#}
{% macro _postgres_setup_sql(spec, ctx, signature, options) %}
  {%- set registry = ctx['schema'] ~ '.feeds' -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set own_names = [] -%}
  {%- for kind, name in ctx['n'].items() if kind != 'guc' -%}
    {%- do own_names.append(lit(name)) -%}
  {%- endfor -%}
  {%- set relation_arg = changefeed._postgres_relation_arg(spec) -%}
  {%- set body -%}
<<cf>>
declare
  r record;
  v_clash record;
begin
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('changefeed/setup', 0));
{{ changefeed._postgres_execute_all(changefeed._postgres_registry_statements(spec['schema'])) }}
  select f.mode, f.key_signature, f.protocol_version, f.options into r
    from {{ registry }} as f where f.feed_id = {{ ctx['lit_feed'] }};
  if found then
    if r.mode <> {{ lit(spec['mode']) }} or r.key_signature <> {{ lit(signature) }} then
      raise exception using errcode = 'CF008',
        message = 'changefeed: the feed ' || {{ ctx['lit_feed'] }} || ' is registered with mode ' || r.mode
          || ' and key (' || r.key_signature || '), but the config asks for mode ' || {{ lit(spec['mode']) }}
          || ' and key (' || {{ lit(signature) }} || ')',
        hint = {{ lit("Keep the registered mode and key, or run `dbt run-operation changefeed.teardown_feed --args '{relation: "
                      ~ relation_arg ~ "}'` (this drops the feed and its history) and set it up again.") }};
    end if;
    if r.protocol_version <> {{ spec['protocol_version'] }} then
      raise exception using errcode = 'CF008',
        message = 'changefeed: the feed ' || {{ ctx['lit_feed'] }} || ' has protocol version ' || r.protocol_version::text
          || ' and this package ' || {{ lit(spec['protocol_version'] | string) }},
        hint = {{ lit("Run `dbt run-operation changefeed.upgrade_feed --args '{relation: " ~ relation_arg
                      ~ ", mode: " ~ spec['mode'] ~ "}'` (or upgrade the package if the feed's version is newer).") }};
    end if;
    if r.options = {{ lit(tojson(options)) }}::jsonb then
      -- Set up meanwhile by a concurrent setup with the same config, or (capture: trigger)
      -- the source table was rebuilt and lost its triggers.
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_sql_capture_sync(ctx) if ctx['capture'] == 'trigger' else '' }}
      return;
    end if;
    -- Only the options changed: replace the routines, which embed them. `create or replace`
    -- keeps each routine's identity, so a call already running (a writer waiting in lock)
    -- finishes on the old body instead of failing with "cache lookup failed".
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_execute_all(changefeed._postgres_routine_statements(ctx)
     + changefeed._postgres_grants_statements(ctx, routines_only=true)) }}
{{ changefeed._postgres_sql_capture_sync(ctx) }}
    update {{ registry }} as f
       set options = {{ lit(tojson(options)) }}::jsonb, names = {{ lit(tojson(ctx['n'])) }}::jsonb,
           updated_at = pg_catalog.now()
     where f.feed_id = {{ ctx['lit_feed'] }};
    return;
  end if;
  select f.feed_id, e.name into v_clash
    from {{ registry }} as f cross join lateral pg_catalog.jsonb_each_text(f.names) as e (kind, name)
   where e.kind <> 'guc' and e.name = any (array[{{ own_names | join(', ') }}]::text[])
   limit 1;
  if found then
    raise exception using errcode = 'CF008',
      message = 'changefeed: the object name ' || pg_catalog.quote_ident(v_clash.name) || ' that the feed '
        || {{ ctx['lit_feed'] }} || ' needs is already used by the feed ' || v_clash.feed_id,
      hint = 'The two tables'' names share a shortened prefix and md5 prefix; rename one of the tables.';
  end if;
{{ changefeed._postgres_execute_all(changefeed._postgres_tables_statements(ctx)) }}
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_execute_all(changefeed._postgres_routine_statements(ctx)
     + changefeed._postgres_grants_statements(ctx)) }}
{{ changefeed._postgres_sql_capture_sync(ctx) }}
  insert into {{ registry }} as f
    (feed_id, source_database, source_schema, source_table, source_relation, mode, key_signature,
     keys, options, names, protocol_version)
  values ({{ ctx['lit_feed'] }}, {{ lit(spec['database']) }}, {{ lit(spec['source_schema']) }},
          {{ lit(spec['source_table']) }}, {{ lit(spec['source_relation']) }}, {{ lit(spec['mode']) }},
          {{ lit(signature) }}, {{ lit(tojson(spec['keys'])) }}::jsonb, {{ lit(tojson(options)) }}::jsonb,
          {{ lit(tojson(ctx['n'])) }}::jsonb, {{ spec['protocol_version'] }});
end
  {%- endset -%}
  {{ return('do ' ~ changefeed._postgres_dollar_quote(body, 'cfsetup')) }}
{% endmacro %}
