{#- postgres__teardown_feed: the postgres implementation of changefeed.teardown_feed (macros/teardown_feed.sql). -#}
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
  names them. Returns 'dropped' or 'absent'.
-#}
{% macro _postgres_teardown_feed(spec) %}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set names = row['names'] if row is not none else ctx['n'] -%}
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
  {%- do q.update({'capture': ctx['schema'] ~ '.' ~ changefeed._postgres_ident(capture_names['capture'])}) -%}
  {%- set registry = ctx['schema'] ~ '.feeds' -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set statements = changefeed._postgres_drop_routine_statements(drop_ctx) -%}
  {%- for kind in ['outbox', 'feed', 'session', 'incident', 'state'] if kind in q -%}
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
  {%- do changefeed._postgres_run_ddl('do ' ~ changefeed._postgres_dollar_quote(body, 'cfteardown')) -%}
  {%- set action = 'dropped' if row is not none else 'absent' -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ (" torn down" if row is not none else " was not registered; dropped any of its objects that existed"), info=true) -%}
  {{ return(action) }}
{% endmacro %}
