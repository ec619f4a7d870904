{#- For tests/test_macro_contracts.py: call a public feed macro as a run-operation would and
    log what it returned (run-operation itself discards return values). -#}
{% macro cf_contract_call(operation, relation, mode=none, capture=none, stall_timeout_ms=none) %}
  {%- if operation == 'setup_feed' -%}
    {%- set returned = changefeed.setup_feed(relation, mode, capture=capture, stall_timeout_ms=stall_timeout_ms) -%}
  {%- elif operation == 'upgrade_feed' -%}
    {%- set returned = changefeed.upgrade_feed(relation, mode, capture=capture, stall_timeout_ms=stall_timeout_ms) -%}
  {%- elif operation == 'teardown_feed' -%}
    {%- set returned = changefeed.teardown_feed(relation) -%}
  {%- else -%}
    {{ exceptions.raise_compiler_error("cf_contract_call: unknown operation " ~ operation) }}
  {%- endif -%}
  {%- do log('cf_contract returned: ' ~ returned, info=true) -%}
{% endmacro %}


{#- For tests/test_pg_retention.py: apply_retention as a run-operation would, logging what
    it returned. -#}
{% macro cf_retention_call(relation, max_age_seconds=none, keep_last=none, override_consumers=false, shard=none) %}
  {%- set returned = changefeed.apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) -%}
  {%- do log('cf_retention returned: ' ~ returned, info=true) -%}
{% endmacro %}


{#- For tests/test_snapshot.py: request_snapshot as a run-operation would, logging what it
    returned as JSON. -#}
{% macro cf_snapshot_call(relation, shard=0, key_from=none, key_to=none) %}
  {%- set returned = changefeed.request_snapshot(relation, shard, key_from, key_to) -%}
  {%- do log('cf_snapshot returned: ' ~ tojson(returned), info=true) -%}
{% endmacro %}
