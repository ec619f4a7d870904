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
            + changefeed._postgres_grants_statements(ctx)) }}
{% endmacro %}
