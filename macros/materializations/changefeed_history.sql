{#-
  materialized='changefeed_history': every version of every key (SCD type 2), with
  valid_from (the time in the event's ULID) and valid_to (the next version's valid_from,
  null for the current one), from a Spark feed, exactly once across re-runs and kills. A
  delete is a version with changefeed_deleted = true that ends the one before it
  (deletes='remove': a view without the delete versions); a late event is placed by its
  ULID. docs/spark.md ("Current state and history") has the configs
  and the granularity of landed feeds, docs/protocol.md 11.8 the mechanism.

    {{ config(materialized='changefeed_history', unique_key=['order_id'], file_format='delta') }}
    select e.* from {{ changefeed.feed_events(source('landing', 'orders_feed'), this) }} as e
-#}
{% materialization changefeed_history, default %}
  {{ changefeed._unsupported_adapter('changefeed_history', 'consumer') }}
{% endmaterialization %}

{% materialization changefeed_history, adapter='spark' %}
  {{ return(changefeed._spark_scd_materialize('changefeed_history')) }}
{% endmaterialization %}
