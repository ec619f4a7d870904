{#-
  Executing generated statements: the setup/upgrade/teardown DO statement in dbt's
  transaction (committed when dbt will not), PL/pgSQL that EXECUTEs a statement list
  inside such a DO block, and catalogue reads that return JSON (protocol section 10).
-#}


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


{#- PL/pgSQL: EXECUTE each statement, in order, as an escaped literal. -#}
{% macro _postgres_execute_all(statements) %}
  {%- set lines = [] -%}
  {%- for statement in statements -%}
    {%- do lines.append('  execute ' ~ changefeed._postgres_literal(statement) ~ ';') -%}
  {%- endfor -%}
  {{ return(lines | join('\n')) }}
{% endmacro %}


{#- Runs a query whose single row and column is JSON text and returns it parsed (none for no
    row). Every catalogue read goes through this, so that agate's type guessing never
    turns a column or table name such as "2024" or "true" into a number or a boolean. -#}
{% macro _postgres_query_json(sql) %}
  {%- set result = run_query('select (' ~ sql ~ ')::text as cf_json') -%}
  {%- if result is none or result.rows | length == 0 or result.rows[0][0] is none -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return(fromjson(result.rows[0][0])) }}
{% endmacro %}
