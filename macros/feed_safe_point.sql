{#-
  feed_safe_point(feed, alias): the safe-point filter of a feed consumer, a predicate
  `<alias>.changefeed_batch <= M`, M being the feed's newest committed batch.

  On Spark the safe point of a shard is its head (docs/protocol.md 11.3), and since a
  shard's batches only move forward (F3), "every batch up to M" is "every shard up to its
  head". M is read from the feed's partition list in the metastore when dbt runs the
  model, before the model's statement, and rendered as a literal: the compiled SQL shows
  the exact end of the run's window, Spark prunes the feed's partitions by it, and a dbt
  unit test can override this macro (overrides: macros: {changefeed.feed_safe_point: "true"}).

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
  {{ changefeed._unsupported_adapter('feed_safe_point', 'consumer') }}
{% endmacro %}

{% macro spark__feed_safe_point(feed, alias) %}
  {%- do changefeed._spark_scd_check_reprocess_selection() -%}
  {%- do changefeed._spark_require_feed('feed_safe_point', feed) -%}
  {#-- partitions that another session registered must be listed by the model's statement --#}
  {%- do run_query('refresh table ' ~ feed) -%}
  {{ return(changefeed._spark_safe_point_predicate(changefeed._spark_last_batch(feed), alias)) }}
{% endmacro %}
