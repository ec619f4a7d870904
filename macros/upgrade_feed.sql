{#-
  Re-creates a feed's procedures and functions only (tables, data and roles are kept),
  e.g. after upgrading the package. Takes the same arguments as setup_feed, because the
  generated code depends on the mode and the key columns; a mismatch with the registered
  feed fails and names it.

    dbt run-operation changefeed.upgrade_feed --args '{relation: shop.orders, mode: outbox}'
-#}
{% macro upgrade_feed(relation, mode=none, key=none, stall_timeout_ms=none, lock_probe_ms=none, capture=none, shard=none, row_image=none) %}
  {{ return(adapter.dispatch('upgrade_feed', 'changefeed')(relation, changefeed._feed_arguments(mode, key, stall_timeout_ms, lock_probe_ms, capture, shard, row_image))) }}
{% endmacro %}

{% macro default__upgrade_feed(relation, options) %}
  {{ changefeed._unsupported_adapter('upgrade_feed', 'feed') }}
{% endmacro %}
