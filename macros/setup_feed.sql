{#-
  Creates a feed for a table: its state, feed, outbox and session tables, sequence,
  procedures and roles (docs/protocol.md section 9). Idempotent: with an unchanged
  config it does nothing; a changed mode or key fails and names the remedy.

    dbt run-operation changefeed.setup_feed --args '{relation: shop.orders, mode: outbox}'
-#}
{% macro setup_feed(relation, mode=none, key=none, stall_timeout_ms=none, lock_probe_ms=none, capture=none, shard=none, row_image=none) %}
  {{ return(adapter.dispatch('setup_feed', 'changefeed')(relation, changefeed._feed_arguments(mode, key, stall_timeout_ms, lock_probe_ms, capture, shard, row_image))) }}
{% endmacro %}

{% macro default__setup_feed(relation, options, model=none) %}
  {{ changefeed._unsupported_adapter('setup_feed', 'feed') }}
{% endmacro %}
