{#-
  Tearing a feed down (protocol section 10): postgres__teardown_feed and the one DO
  statement that drops the feed's objects (section 9), roles and registry row.

  Contract: postgres__teardown_feed returns exactly one of
    'dropped'  the feed was registered and is gone;
    'absent'   it was not registered (any of its objects that existed were dropped);
  and none when dbt is only parsing (execute is false).
-#}


{#- Teardown needs only the feed's identity (no mode, key or options), so that a feed can be
    removed whatever its config says now. -#}
{% macro postgres__teardown_feed(relation) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {{ return(changefeed._postgres_teardown_feed(changefeed._feed_identity(changefeed._feed_relation(relation)))) }}
{% endmacro %}


{#-
  Drops every object of a feed (its history and undelivered outbox rows included), its
  roles and its registry row, in one statement under the setup lock. Names come from the
  registry row when there is one (else they are computed, and whatever exists is dropped),
  so a feed set up by an older package is removed exactly. The source table is untouched.
  A role that was granted privileges beyond the feed's own cannot be dropped: the error
  names them. Returns the contract's word (see the file header).
-#}
{% macro _postgres_teardown_feed(spec) %}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set names = row['names'] if row is not none else ctx['n'] -%}
  {%- do changefeed._postgres_run_ddl(changefeed._postgres_sql_teardown(ctx, names)) -%}
  {%- set action = 'dropped' if row is not none else 'absent' -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ (" torn down" if row is not none else " was not registered; dropped any of its objects that existed"), info=true) -%}
  {{ return(action) }}
{% endmacro %}


{#-
  The teardown statement for a feed whose objects have the given names (the registry's,
  or computed): capture triggers first (they depend on the capture function), then the
  routines, tables and sequence, the roles after revoking what the feed granted them, and
  the registry row; under the setup lock, so it never interleaves with a setup. Pure: it
  runs no query, so tests can render it.
-#}
{% macro _postgres_sql_teardown(ctx, names) %}
  {%- set q = {} -%}
  {%- for kind, name in names.items() -%}
    {%- do q.update({kind: ctx['schema'] ~ '.' ~ changefeed._postgres_ident(name)}) -%}
  {%- endfor -%}
  {%- set drop_ctx = {'mode': none, 'q': q} -%}
  {#- The capture triggers go first (they depend on the capture function); an outbox feed
      registered without capture has none, but looking costs nothing and takes no lock. -#}
  {%- set capture_names = {} -%}
  {%- do capture_names.update(ctx['capture_names']) -%}
  {%- for kind in capture_names if kind in names -%}
    {%- do capture_names.update({kind: names[kind]}) -%}
  {%- endfor -%}
  {%- set capture_ctx = {'mode': none, 'capture': 'none', 'capture_names': capture_names,
                         'q_source': ctx['q_source'], 'lit_source': ctx['lit_source']} -%}
  {%- for kind in ['capture', 'recapture'] -%}
    {%- do q.update({kind: ctx['schema'] ~ '.' ~ changefeed._postgres_ident(capture_names[kind])}) -%}
  {%- endfor -%}
  {%- set registry = ctx['schema'] ~ '.feeds' -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set statements = changefeed._postgres_drop_routine_statements(drop_ctx) -%}
  {%- for kind in changefeed._feed_table_kinds() if kind in q -%}
    {%- do statements.append('drop table if exists ' ~ q[kind]) -%}
  {%- endfor -%}
  {%- if 'sequence' in q -%}
    {%- do statements.append('drop sequence if exists ' ~ q['sequence']) -%}
  {%- endif -%}
  {%- set body -%}
begin
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('changefeed/setup', 0));
{{ changefeed._postgres_sql_capture_sync(capture_ctx) }}
{{ changefeed._postgres_execute_all(statements) }}
{%- for role_kind in ['writer_role', 'reader_role'] if role_kind in names %}
  {%- set role_name = names[role_kind] %}
  if exists (select 1 from pg_catalog.pg_roles where rolname = {{ lit(role_name) }}) then
    if pg_catalog.to_regnamespace({{ lit(ctx['schema']) }}) is not null then
      execute {{ lit('revoke all on schema ' ~ ctx['schema'] ~ ' from ' ~ changefeed._postgres_ident(role_name)) }};
    end if;
    if pg_catalog.to_regclass({{ lit(registry) }}) is not null then
      execute {{ lit('revoke all on ' ~ registry ~ ' from ' ~ changefeed._postgres_ident(role_name)) }};
    end if;
    execute {{ lit('drop role ' ~ changefeed._postgres_ident(role_name)) }};
  end if;
{%- endfor %}
  if pg_catalog.to_regclass({{ lit(registry) }}) is not null then
    execute {{ lit('delete from ' ~ registry ~ ' where feed_id = ' ~ ctx['lit_feed']) }};
  end if;
end
  {%- endset -%}
  {{ return('do ' ~ changefeed._postgres_dollar_quote(body, 'cfteardown')) }}
{% endmacro %}


{#- drop statements for the feed's functions and procedures (teardown). With
    mode none, every kind is dropped if it exists. -#}
{% macro _postgres_drop_routine_statements(ctx) %}
  {%- set statements = [] -%}
  {%- for kind, word in changefeed._postgres_routine_kinds(ctx['mode']) | reverse -%}
    {%- if kind in ctx['q'] -%}
      {#- cascade: the guard function's trigger on the feed table goes with it. -#}
      {%- do statements.append('drop ' ~ word ~ ' if exists ' ~ ctx['q'][kind] ~ (' cascade' if kind == 'guard' else '')) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}
