{#-
  Removes a feed's old events by a policy, never past a registered consumer's cursor
  unless override_consumers (docs/protocol.md section 8.1). A reader whose cursor lies
  below the removed events then fails with CF013 (fell behind retention) instead of
  skipping them.

    dbt run-operation changefeed.apply_retention --args '{relation: shop.orders, max_age_seconds: 604800}'
-#}
{% macro apply_retention(relation, max_age_seconds=none, keep_last=none, override_consumers=false, shard=none) %}
  {{ return(adapter.dispatch('apply_retention', 'changefeed')(relation, max_age_seconds, keep_last, override_consumers, shard)) }}
{% endmacro %}

{% macro default__apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) %}
  {{ changefeed._unsupported_adapter('apply_retention', 'feed') }}
{% endmacro %}
