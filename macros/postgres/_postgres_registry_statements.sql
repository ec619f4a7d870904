{#- The changefeed schema and the shared feed registry (protocol section 9), created if
    missing. Every feed of the database has one row; `names` maps each object kind to the
    name this feed uses, so that clients read names rather than recompute them. -#}
{% macro _postgres_registry_statements(schema_name) %}
  {%- set schema = changefeed._postgres_ident(schema_name) -%}
  {{ return([
    'create schema if not exists ' ~ schema,
    'create table if not exists ' ~ schema ~ '.feeds (
  feed_id text not null primary key,
  source_database text not null,
  source_schema text not null,
  source_table text not null,
  source_relation text not null,
  mode text not null,
  key_signature text not null,
  keys jsonb not null,
  options jsonb not null,
  names jsonb not null,
  protocol_version integer not null,
  created_at timestamptz not null default pg_catalog.now(),
  updated_at timestamptz not null default pg_catalog.now()
)',
  ]) }}
{% endmacro %}
