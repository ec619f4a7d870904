{#-
  Drops every object of a feed, its registry row and its roles. Destructive: the feed's
  history and any undelivered outbox rows are gone. The source table is not touched.

    dbt run-operation changefeed.teardown_feed --args '{relation: shop.orders}'
-#}
{% macro teardown_feed(relation) %}
  {{ return(adapter.dispatch('teardown_feed', 'changefeed')(relation)) }}
{% endmacro %}

{% macro default__teardown_feed(relation) %}
  {{ changefeed._unsupported_adapter('teardown_feed', 'feed') }}
{% endmacro %}
