{#- Runs one setup/upgrade/teardown statement in dbt's transaction and commits it when dbt
    will not: under `dbt run-operation` (and on-run-start/end hooks) nothing commits, and
    releasing the connection rolls back. Inside a model's, seed's or snapshot's hooks the
    node's own transaction commits it, all or nothing with the node, so nothing is
    committed here. The statement is a single DO block, so it is atomic even on an
    autocommit connection. -#}
{% macro _postgres_run_ddl(sql) %}
  {%- call statement('changefeed_ddl', fetch_result=false, auto_begin=true) -%}
    {{ sql }}
  {%- endcall -%}
  {%- set node_type = model.resource_type if (model is defined and model) else none -%}
  {%- if node_type not in ['model', 'seed', 'snapshot'] -%}
    {%- do adapter.commit() -%}
  {%- endif -%}
{% endmacro %}
