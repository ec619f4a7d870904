{#-
  Requests a snapshot of a feed's source table (docs/protocol.md section 12): reserves
  one empty block of ULIDs in the shard and records the request; the next landing of the
  feed lands every existing row of the table (or of the key range) as an event, then goes
  on with the live events. Keys are inclusive bounds: a value for a one-column key, or a
  list with one value per key column.

    dbt run-operation changefeed.request_snapshot --args '{relation: shop.orders}'
    dbt run-operation changefeed.request_snapshot --args '{relation: shop.orders, key_from: 1000, key_to: 1999}'
-#}
{% macro request_snapshot(relation, shard=0, key_from=none, key_to=none) %}
  {{ return(adapter.dispatch('request_snapshot', 'changefeed')(relation, shard, key_from, key_to)) }}
{% endmacro %}

{% macro default__request_snapshot(relation, shard, key_from, key_to) %}
  {{ changefeed._unsupported_adapter('request_snapshot', 'feed') }}
{% endmacro %}
