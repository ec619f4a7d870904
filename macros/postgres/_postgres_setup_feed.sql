{#-
  Sets up one feed (called by postgres__setup_feed with the spec). Idempotent and all or
  nothing (protocol section 10): an unchanged config is a no-op; a changed mode or key, or
  a protocol version mismatch, fails with the remedy; changed options re-create the
  routines. The registry is checked here first for clear compiler errors, and again
  inside the setup statement under the setup lock for concurrent setups.
  Returns 'created', 'updated' or 'unchanged'.
-#}
{% macro _postgres_setup_feed(spec) %}
  {%- set ctx = changefeed._postgres_feed_context(spec) -%}
  {%- set signature = changefeed._postgres_key_signature(spec['keys']) -%}
  {%- set options = changefeed._postgres_feed_options(spec) -%}
  {%- set row = changefeed._postgres_registry_row(spec) -%}
  {%- if row is not none and changefeed._postgres_check_registered(spec, row, signature, options, 'setup') -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " is already set up (" ~ spec['mode'] ~ "); nothing to do", info=true) -%}
    {{ return('unchanged') }}
  {%- endif -%}
  {%- do changefeed._postgres_run_ddl(changefeed._postgres_setup_sql(spec, ctx, signature, options)) -%}
  {%- set action = 'created' if row is none else 'updated' -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " " ~ action ~ " (" ~ spec['mode'] ~ ", key "
             ~ signature ~ ", schema " ~ spec['schema'] ~ ")", info=true) -%}
  {{ return(action) }}
{% endmacro %}
