{#-
  feed_events(feed, output=none): a subquery of the feed's events from the consumer's
  cursor (if output is given) up to the safe point, i.e. feed_safe_point and
  feed_cursor in one call. Its columns are the feed's, with the feed's changefeed_batch
  renamed changefeed_feed_batch (the column a consumer's cursor is read from), so that
  `select e.*, {{ changefeed.feed_batch() }} as changefeed_batch` is a complete consumer.

    from {{ changefeed.feed_events(ref('orders_feed'), this if is_incremental() else none) }} as e

  feed    the feed: ref('...') or source('...', '...')
  output  the consumer's output (`this`) on incremental runs, none to read from the start
-#}
{% macro feed_events(feed, output=none) %}
  {%- do changefeed._spark_check_relation('feed_events', 'feed', feed) -%}
  {%- if output is not none -%}
    {%- do changefeed._spark_check_relation('feed_events', 'output', output) -%}
  {%- endif -%}
  {%- if not execute -%}{{ return('(select * from ' ~ feed ~ ')') }}{%- endif -%}
  {{ return(adapter.dispatch('feed_events', 'changefeed')(feed, output)) }}
{% endmacro %}

{% macro default__feed_events(feed, output) %}
  {{ changefeed._unsupported_adapter('feed_events', 'consumer') }}
{% endmacro %}

{% macro spark__feed_events(feed, output) %}
  {#-- changefeed_reprocess (a state consumer's range re-processing): every consumed event --#}
  {%- set reprocess = var('changefeed_reprocess', none) is not none -%}
  {%- if reprocess -%}
    {%- do changefeed._spark_scd_check_reprocessable(output) -%}
  {%- endif -%}
  {%- do changefeed._spark_require_feed('feed_events', feed) -%}
  {#-- before the cursor is read: one run of the model at a time --#}
  {%- do changefeed._spark_claim_take() -%}
  {%- set columns = [] -%}
  {%- for column in adapter.get_columns_in_relation(feed) -%}
    {%- if column.name | lower == 'changefeed_batch' -%}
      {%- do columns.append('changefeed_events.' ~ adapter.quote(column.name) ~ ' as changefeed_feed_batch') -%}
    {%- else -%}
      {%- do columns.append('changefeed_events.' ~ adapter.quote(column.name)) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if columns | length == 0 -%}
    {{ exceptions.raise_compiler_error("changefeed.feed_events: the feed " ~ feed ~ " does not exist or has no columns") }}
  {%- endif -%}
  {%- set sql -%}
(
    select {{ columns | join(', ') }}
    from {{ feed }} as changefeed_events
    where {{ changefeed.feed_safe_point(feed, 'changefeed_events') }}
    {%- if reprocess %}
      and {{ changefeed._spark_scd_reprocess_window(output, 'changefeed_events') }}
    {%- elif output is not none %}
      and {{ changefeed.feed_cursor('changefeed_events', output, feed) }}
    {%- endif %}
)
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
