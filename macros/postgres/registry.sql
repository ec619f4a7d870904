{#-
  The shared feed registry (protocol section 9): its DDL, reading one feed's row, and the
  check of a row against the requested spec that turns a changed mode or key, or a
  protocol version mismatch, into an error naming the remedy (section 10, D1).
-#}


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


{#- The feed's registry row as a mapping (none if the registry or the row does not exist). -#}
{% macro _postgres_registry_row(spec) %}
  {%- set registry = changefeed._postgres_ident(spec['schema']) ~ '.feeds' -%}
  {%- set found = changefeed._postgres_query_json(
      "select pg_catalog.json_build_object('t', pg_catalog.to_regclass(" ~ changefeed._postgres_literal(registry) ~ "))") -%}
  {%- if found is none or found['t'] is none -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(changefeed._postgres_query_json(
      "select pg_catalog.row_to_json(f) from " ~ registry ~ " as f where f.feed_id = "
      ~ changefeed._postgres_literal(spec['feed_id']))) }}
{% endmacro %}


{#-
  Compares a feed's registry row with the requested spec (protocol section 10, D1) and
  raises a compiler error naming the difference and the remedy when the mode or the key
  changed, or when the protocol versions differ (operation 'setup'; 'upgrade' accepts an
  older registered version). Returns true when the options are unchanged too.
-#}
{% macro _postgres_check_registered(spec, row, signature, options, operation) %}
  {%- set relation_arg = changefeed._postgres_relation_arg(spec) -%}
  {%- if row['mode'] != spec['mode'] or row['key_signature'] != signature -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is registered with mode " ~ row['mode']
        ~ " and key (" ~ row['key_signature'] ~ "), but the config asks for mode " ~ spec['mode']
        ~ " and key (" ~ signature ~ "). A feed's mode and key cannot change in place: either keep"
        ~ " the registered mode and key, or run `dbt run-operation changefeed.teardown_feed --args"
        ~ " '{relation: " ~ relation_arg ~ "}'` (this drops the feed and its history) and set it up"
        ~ " again, or set up a new feed on another table.") }}
  {%- endif -%}
  {%- if row['protocol_version'] > spec['protocol_version'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a newer changefeed package (protocol version "
        ~ row['protocol_version'] ~ "; this package has " ~ spec['protocol_version'] ~ "); upgrade the package") }}
  {%- endif -%}
  {%- if operation == 'setup' and row['protocol_version'] < spec['protocol_version'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up with protocol version " ~ row['protocol_version']
        ~ " and this package has version " ~ spec['protocol_version'] ~ "; run `dbt run-operation"
        ~ " changefeed.upgrade_feed --args '{relation: " ~ relation_arg ~ ", mode: " ~ spec['mode'] ~ "}'`") }}
  {%- endif -%}
  {{ return(row['options'] == options) }}
{% endmacro %}
