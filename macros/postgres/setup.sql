{#-
  Setting up a feed (protocol section 10): postgres__setup_feed, the one DO statement that
  creates or updates the feed under the setup lock, and the statement lists it is built
  from (registry, tables, routines, grants; sections 3-9).

  Contract: postgres__setup_feed returns exactly one of
    'created'   the feed did not exist and was set up;
    'updated'   it existed with other options, and its routines were re-created;
    'repaired'  the config was unchanged but a constraint of a newer package was missing
                (added), or the capture triggers were missing or disabled, or the source's
                captured columns changed (the capture is re-created);
    'unchanged' nothing to do;
  and none when dbt is only parsing (execute is false).
-#}


{#- Options are validated once, adapter-neutrally, by _feed_build_spec (macros/_feed/);
    everything below trusts the spec. -#}
{% macro postgres__setup_feed(relation, options, model=none) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(relation, options, changefeed._postgres_key_columns, model) -%}
  {{ return(changefeed._postgres_setup_feed(spec)) }}
{% endmacro %}


{#-
  Sets up one feed (called by postgres__setup_feed with the spec). Idempotent and all or
  nothing (protocol section 10): an unchanged config is a no-op; a changed mode or key, or
  a protocol version mismatch, fails with the remedy; changed options re-create the
  routines. The registry is checked here first for clear compiler errors, and again
  inside the setup statement under the setup lock for concurrent setups.
  With capture: trigger, an unchanged config whose source table lost its triggers (dbt
  rebuilt the table) re-creates them. For a dbt model (spec['model'], from feed_post_hook)
  a new feed gets an event for every row the table already has, and a lost trigger is an
  error instead (its writes since then have no events). Returns the contract's word (see
  the file header).
-#}
{% macro _postgres_setup_feed(spec) %}
  {%- do spec.update({'capture_columns': changefeed._postgres_capture_columns(spec)}) -%}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set signature = changefeed._postgres_key_signature(spec['keys']) -%}
  {%- set options = changefeed._postgres_feed_options(spec) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- set unchanged = row is not none and changefeed._postgres_check_registered(spec, row, signature, options, 'setup') -%}
  {%- if row is not none -%}
    {%- do changefeed._feed_check_stated_drops(spec, row['options']) -%}
  {%- endif -%}
  {%- set repairs = [] -%}
  {%- if unchanged -%}
    {%- do repairs.extend(changefeed._postgres_constraints_missing(ctx)) -%}
  {%- endif -%}
  {%- if unchanged and changefeed._postgres_recapture_missing(ctx) -%}
    {%- do repairs.append("created the event trigger that captures " ~ ctx['q_source']
                          ~ " again when it is re-created without setup") -%}
  {%- endif -%}
  {%- if unchanged and changefeed._postgres_capture_needs_repair(ctx) -%}
    {%- do repairs.append("re-created the capture function and triggers on " ~ ctx['q_source']
                          ~ " (the table was rebuilt or altered, or they were dropped or disabled)") -%}
  {%- endif -%}
  {%- if unchanged and not repairs -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " is already set up (" ~ spec['mode'] ~ "); nothing to do", info=true) -%}
    {%- do changefeed._postgres_log_missing_recapture(spec, ctx) -%}
    {{ return('unchanged') }}
  {%- endif -%}
  {%- if unchanged and spec.get('model') is not none -%}
    {{ changefeed._feed_model_rebuilt_error(spec) }}
  {%- endif -%}
  {%- do changefeed._postgres_run_ddl(changefeed._postgres_sql_setup(spec, ctx, signature, options)) -%}
  {%- if row is none and spec.get('model') is not none -%}
    {%- do changefeed._postgres_run_ddl(changefeed._postgres_sql_seed(ctx)) -%}
  {%- endif -%}
  {%- if unchanged -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ ": " ~ repairs | join('; '), info=true) -%}
    {%- do changefeed._postgres_log_missing_recapture(spec, ctx) -%}
    {{ return('repaired') }}
  {%- endif -%}
  {%- set action = 'created' if row is none else 'updated' -%}
  {%- set changed = [] if row is none else changefeed._feed_option_changes(row['options'], options) -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " " ~ action ~ " (" ~ spec['mode'] ~ ", key "
             ~ signature ~ ", schema " ~ spec['schema']
             ~ (", capture: trigger, shard " ~ spec['shard'] if ctx['capture'] == 'trigger' else '') ~ ")"
             ~ ("; changed: " ~ changed | join(', ') if changed else ''), info=true) -%}
  {%- if row is none and spec.get('model') is none
        and run_query('select 1 from ' ~ ctx['q_source'] ~ ' limit 1').rows | length > 0 -%}
    {%- do log(changefeed._feed_existing_rows_hint(spec), info=true) -%}
  {%- endif -%}
  {%- do changefeed._postgres_log_missing_recapture(spec, ctx) -%}
  {{ return(action) }}
{% endmacro %}


{#- capture: trigger's guard against a re-created source (protocol 5.1), as setup sees it:
    the current role, whether it is a superuser (event triggers need one) and whether the
    event trigger and its function both exist. -#}
{% macro _postgres_recapture_state(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set row = run_query('select current_user,'
      ~ ' (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = current_user),'
      ~ ' exists (select 1 from pg_catalog.pg_event_trigger where evtname = '
      ~ lit(ctx['capture_names']['recapture_trigger']) ~ ') and pg_catalog.to_regprocedure('
      ~ lit(ctx['q']['recapture'] ~ '()') ~ ') is not null').rows[0] -%}
  {{ return({'user': row[0], 'superuser': row[1] is sameas true, 'guarded': row[2] is sameas true}) }}
{% endmacro %}


{#- capture: trigger whose guard is missing, and a superuser to create it: a feed set up
    before the guard existed, or by another role. -#}
{% macro _postgres_recapture_missing(ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return(false) }}
  {%- endif -%}
  {%- set state = changefeed._postgres_recapture_state(ctx) -%}
  {{ return(state['superuser'] and not state['guarded']) }}
{% endmacro %}


{#- capture: trigger set up by a role that is not a superuser: setup could not create the
    guard; say so. -#}
{% macro _postgres_log_missing_recapture(spec, ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set state = changefeed._postgres_recapture_state(ctx) -%}
  {%- if not state['guarded'] -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ ": no event trigger captures its source table when it is"
        ~ " re-created without setup, because " ~ state['user'] ~ " is not a superuser (PostgreSQL's event triggers"
        ~ " need one); run setup_feed as a superuser, or run it again after every re-creation of the table"
        ~ " (until then reads fail with CF011 and the writes in between have no events)", info=true) -%}
  {%- endif -%}
{% endmacro %}


{#-
  One DO statement that sets up a feed, all or nothing (protocol section 10, D1/D2): it
  takes the setup lock (a transaction advisory lock), creates the registry if missing,
  then re-checks the registry under the lock, so that a concurrent setup that won the
  race turns this one into a no-op (or an error if it registered a different mode or
  key). A changed option re-creates the routines. Being one statement, it is atomic even
  on an autocommit connection; inside a model's transaction it commits with the model.
-#}
{% macro _postgres_sql_setup(spec, ctx, signature, options) %}
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
{{ changefeed._postgres_sql_constraints_sync(ctx) }}
{%- if ctx['mode'] == 'blocking' %}
{{ changefeed._postgres_execute_all([changefeed._postgres_routine_guard(ctx), 'revoke all on function ' ~ ctx['q']['guard'] ~ ' from public']) }}
{%- endif %}
{{ changefeed._postgres_sql_guard_sync(ctx) }}
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_execute_all(changefeed._postgres_capture_routine_statements(ctx)) }}
{{ changefeed._postgres_sql_capture_sync(ctx) if ctx['capture'] == 'trigger' else '' }}
{{ changefeed._postgres_sql_snapshot_add(ctx) }}
      return;
    end if;
    -- Only the options changed: replace the routines, which embed them. `create or replace`
    -- keeps each routine's identity, so a call already running (a writer waiting in lock)
    -- finishes on the old body instead of failing with "cache lookup failed".
{{ changefeed._postgres_sql_constraints_sync(ctx) }}{{ changefeed._postgres_sql_row_image_sync(ctx) }}
{{ changefeed._postgres_sql_retention_sync(ctx) }}
{{ changefeed._postgres_sql_snapshot_sync(ctx) }}
{{ changefeed._postgres_sql_capture_check(ctx) }}
{{ changefeed._postgres_execute_all(changefeed._postgres_routine_statements(ctx)
     + changefeed._postgres_grants_statements(ctx, routines_only=true)) }}
{{ changefeed._postgres_sql_guard_sync(ctx) }}
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
{{ changefeed._postgres_sql_retention_sync(ctx) }}
{{ changefeed._postgres_sql_snapshot_sync(ctx) }}
{{ changefeed._postgres_sql_guard_sync(ctx) }}
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


{#-
  Every statement that creates one feed (protocol sections 3-9), in order: the registry
  (if missing), the sequence and tables, the routines, the roles and grants. Pure: it
  runs no query, so tests can render it. _postgres_setup_feed runs these in one
  transaction under the setup lock.
-#}
{% macro _postgres_feed_statements(spec) %}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {{ return(changefeed._postgres_registry_statements(spec['schema'])
            + changefeed._postgres_tables_statements(ctx)
            + changefeed._postgres_routine_statements(ctx)
            + changefeed._postgres_grants_statements(ctx)
            + changefeed._postgres_retention_tables_statements(ctx)
            + changefeed._postgres_snapshot_tables_statements(ctx)) }}
{% endmacro %}


{#-
  create statements for the feed's functions and procedures, each followed by
  `revoke all ... from public` (PostgreSQL grants execute to public by default). The
  routine of kind X comes from the macro _postgres_routine_X, looked up by name, so
  _postgres_routine_kinds (and the kinds it takes from _feed_routine_kinds) is the only
  list to extend.
-#}
{% macro _postgres_routine_statements(ctx) %}
  {%- set statements = [] -%}
  {%- for kind, word in changefeed._postgres_routine_kinds(ctx['mode'], ctx['capture']) -%}
    {%- do statements.append(changefeed._feed_routine_macro('postgres', kind)(ctx)) -%}
    {%- do statements.append('revoke all on ' ~ word ~ ' ' ~ ctx['q'][kind] ~ ' from public') -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}


{#- The capture function's create and revoke statements (capture: trigger), or none. -#}
{% macro _postgres_capture_routine_statements(ctx) %}
  {%- if ctx['capture'] != 'trigger' -%}
    {{ return([]) }}
  {%- endif -%}
  {{ return([changefeed._postgres_routine_capture(ctx),
             'revoke all on function ' ~ ctx['q']['capture'] ~ ' from public',
             changefeed._postgres_routine_recapture(ctx),
             'revoke all on function ' ~ ctx['q']['recapture'] ~ ' from public']) }}
{% endmacro %}


{#-
  The feed's routines for a mode, in creation order, as (kind, 'function' | 'procedure'):
  the ones every adapter has (_feed_routine_kinds, macros/_feed/spec.sql), with
  PostgreSQL's own around them: lock_try and (blocking) lock_wait, which lock calls;
  (outbox) move_outbox, which SQL Server does inside read_feed; capture: the trigger
  functions of capture: trigger (mode none: every kind, for teardown). To add a routine
  X: write _postgres_routine_X(ctx) in the file of its protocol concern, list X in
  _feed_routine_kinds (or here, if only PostgreSQL has it), name it in
  _postgres_feed_names (context.sql) and grant it in _postgres_grants_statements
  (grants.sql).
-#}
{% macro _postgres_routine_kinds(mode, capture='none') %}
  {%- set kinds = ['lock_try'] + (['lock_wait'] if mode != 'outbox' else []) + changefeed._feed_routine_kinds(mode)
      + (['move_outbox'] if mode != 'blocking' else []) -%}
  {%- if mode is none or capture == 'trigger' -%}
    {%- do kinds.extend(['capture', 'recapture']) -%}
  {%- endif -%}
  {%- set routines = [] -%}
  {%- for kind in kinds -%}
    {%- do routines.append((kind, 'procedure' if kind in ['lock', 'move_outbox'] else 'function')) -%}
  {%- endfor -%}
  {{ return(routines) }}
{% endmacro %}
