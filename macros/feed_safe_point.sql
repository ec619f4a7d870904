{#-
  feed_safe_point(feed, alias): the safe-point filter of a feed consumer, a predicate
  `<alias>.ulid <= <safe point of the row's shard>`.

  On Spark the safe point of a shard is its head, max(ulid) over the feed's committed
  rows (docs/protocol.md 11.3). It is read when dbt runs the model, in a query of its
  own before the model's statement, and rendered as literals, so the compiled SQL shows
  the exact end of the run's window and a dbt unit test can override this macro
  (overrides: macros: {changefeed.feed_safe_point: "true"}).

    from {{ ref('orders_feed') }} as e
    where {{ changefeed.feed_safe_point(ref('orders_feed'), 'e') }}

  feed   the feed: ref('...') or source('...', '...')
  alias  the alias the FROM clause gives the feed
-#}
{% macro feed_safe_point(feed, alias) %}
  {%- do changefeed._spark_check_relation('feed_safe_point', 'feed', feed) -%}
  {%- do changefeed._spark_check_alias('feed_safe_point', alias) -%}
  {%- if not execute -%}{{ return('true') }}{%- endif -%}
  {{ return(adapter.dispatch('feed_safe_point', 'changefeed')(feed, alias)) }}
{% endmacro %}

{% macro default__feed_safe_point(feed, alias) %}
  {{ changefeed._spark_unsupported('feed_safe_point') }}
{% endmacro %}

{% macro spark__feed_safe_point(feed, alias) %}
  {{ return(changefeed._spark_safe_point_predicate(changefeed._spark_feed_heads(feed), alias)) }}
{% endmacro %}
