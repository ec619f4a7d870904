{#- postgres__setup_feed: the postgres implementation of changefeed.setup_feed (macros/setup_feed.sql). -#}
{% macro postgres__setup_feed(relation, mode, key, stall_timeout_ms, lock_probe_ms, capture, shard) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(
      relation, mode, key, stall_timeout_ms, lock_probe_ms, changefeed._postgres_key_columns, capture, shard) -%}
  {{ return(changefeed._postgres_setup_feed(spec)) }}
{% endmacro %}

{#-
  Sets up one feed (called by postgres__setup_feed with the spec). Idempotent and all or
  nothing (protocol section 10): an unchanged config is a no-op; a changed mode or key, or
  a protocol version mismatch, fails with the remedy; changed options re-create the
  routines. The registry is checked here first for clear compiler errors, and again
  inside the setup statement under the setup lock for concurrent setups.
  With capture: trigger, an unchanged config whose source table lost its triggers (dbt
  rebuilt the table) re-creates them. Returns 'created', 'updated', 'repaired' or 'unchanged'.
-#}
{% macro _postgres_setup_feed(spec) %}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set signature = changefeed._postgres_key_signature(spec['keys']) -%}
  {%- set options = changefeed._postgres_feed_options(spec) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- set unchanged = row is not none and changefeed._postgres_check_registered(spec, row, signature, options, 'setup') -%}
  {%- if unchanged and not changefeed._postgres_capture_missing(ctx) -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " is already set up (" ~ spec['mode'] ~ "); nothing to do", info=true) -%}
    {{ return('unchanged') }}
  {%- endif -%}
  {%- do changefeed._postgres_run_ddl(changefeed._postgres_setup_sql(spec, ctx, signature, options)) -%}
  {%- if unchanged -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ ": re-created the capture triggers on " ~ ctx['q_source']
               ~ " (the table was rebuilt or they were dropped)", info=true) -%}
    {{ return('repaired') }}
  {%- endif -%}
  {%- set action = 'created' if row is none else 'updated' -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " " ~ action ~ " (" ~ spec['mode'] ~ ", key "
             ~ signature ~ ", schema " ~ spec['schema']
             ~ (", capture: trigger, shard " ~ spec['shard'] if ctx['capture'] == 'trigger' else '') ~ ")", info=true) -%}
  {{ return(action) }}
{% endmacro %}
