{#-
  materialized='changefeed_current_state': one row per key, the key's newest event
  (SCD type 1), from a Spark feed (landed or published), exactly once across re-runs and
  kills. Deletes are kept as rows with changefeed_deleted = true (a tombstone), so that an
  older event arriving later cannot bring the key back; deletes='remove' keeps them in
  <model>__changefeed_state and makes the model a view of the rows that are not deleted.
  docs/spark.md ("Current state and history") has the configs, docs/protocol.md 11.8 the
  mechanism and its invariants.

    {{ config(materialized='changefeed_current_state', unique_key=['order_id'], file_format='delta') }}
    select e.* from {{ changefeed.feed_events(source('landing', 'orders_feed'), this) }} as e
-#}
{% materialization changefeed_current_state, default %}
  {{ changefeed._unsupported_adapter('changefeed_current_state', 'consumer') }}
{% endmaterialization %}

{% materialization changefeed_current_state, adapter='spark' %}
  {{ return(changefeed._spark_scd_materialize('changefeed_current_state')) }}
{% endmaterialization %}
