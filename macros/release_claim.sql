{#-
  release_claim(model): releases the claim a dbt run holds on a consumer or state model
  (docs/spark.md, "One run of a model at a time"), whoever holds it. For a run that died
  where its claim cannot be checked (another host, a shared Thrift server), so that the
  next run need not wait for changefeed_claim_timeout_minutes. Releasing the claim of a
  run that is still going lets a second run write the model at the same time: check first.

    dbt run-operation changefeed.release_claim --args '{model: orders_state}'

  model   the model's name (as in `dbt run --select <model>`)
-#}
{% macro release_claim(model) %}
  {{ return(adapter.dispatch('release_claim', 'changefeed')(model)) }}
{% endmacro %}

{% macro default__release_claim(model) %}
  {{ changefeed._unsupported_adapter('release_claim', 'consumer') }}
{% endmacro %}

{% macro spark__release_claim(model) %}
  {%- if model is not string or not model -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.release_claim: model must be a model's name, e.g. --args '{model: orders_state}'") }}
  {%- endif -%}
  {%- set nodes = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
                  | selectattr('name', 'equalto', model) | list -%}
  {%- if nodes | length != 1 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.release_claim: " ~ (nodes | length) ~ " models of this project are named '" ~ model
        ~ "'; give the name of one model (dbt ls --resource-type model lists them)") }}
  {%- endif -%}
  {%- set node = nodes[0] -%}
  {%- set holder = changefeed._spark_claim_release(node.schema, node.alias or node.name, force=true)
                   if changefeed._spark_claim_schema_exists() else none -%}
  {%- if holder is none -%}
    {%- do log("changefeed: model '" ~ model ~ "' has no claim held; nothing to release", info=true) -%}
  {%- else -%}
    {%- do log("changefeed: released the claim of model '" ~ model ~ "' held by process " ~ holder.pid
               ~ " on " ~ holder.host ~ " (invocation " ~ holder.invocation_id ~ ")", info=true) -%}
  {%- endif -%}
{% endmacro %}


{#- The package's on-run-end hook (dbt_project.yml): a run's claims are released whether
    its models succeeded or failed. Nothing on adapters without claims. -#}
{% macro _release_run_claims(results) %}
  {{ return(adapter.dispatch('_release_run_claims', 'changefeed')(results)) }}
{% endmacro %}

{% macro default___release_run_claims(results) %}
  {{ return('') }}
{% endmacro %}

{% macro spark___release_run_claims(results) %}
  {%- if execute -%}
    {%- do changefeed._spark_claim_release_run(results) -%}
  {%- endif -%}
  {{ return('') }}
{% endmacro %}
