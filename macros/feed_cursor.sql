{#-
  feed_cursor(alias, output=this): the cursor filter of a feed consumer, a predicate
  `<alias>.changefeed_batch > P`, where P is the feed batch the consumer has consumed up
  to: the highest changefeed_feed_batch of its own committed output (docs/protocol.md
  11.6). Cursor and output are the same rows, so they cannot disagree, and P is read
  from the output's newest partition only. Use it in the model's is_incremental()
  branch; on a first run or a --full-refresh the consumer reads from the start of the feed.

    {% if is_incremental() %}
      and {{ changefeed.feed_cursor('e') }}
    {% endif %}

  alias   the alias the FROM clause gives the feed
  output  the consumer's output (default: this); it must have a changefeed_feed_batch
          column (the feed's changefeed_batch of each consumed event)
  feed    the feed (default: the model's one dependency that is a feed table); a cursor
          below the feed's retention horizon fails with "fell behind retention"
          (docs/protocol.md 11.7) instead of skipping the removed batches
-#}
{% macro feed_cursor(alias, output=none, feed=none) %}
  {%- do changefeed._spark_check_alias('feed_cursor', alias) -%}
  {%- if output is not none -%}
    {%- do changefeed._spark_check_relation('feed_cursor', 'output', output) -%}
  {%- endif -%}
  {%- if feed is not none -%}
    {%- do changefeed._spark_check_relation('feed_cursor', 'feed', feed) -%}
  {%- endif -%}
  {%- if not execute -%}{{ return('true') }}{%- endif -%}
  {{ return(adapter.dispatch('feed_cursor', 'changefeed')(alias, output, feed)) }}
{% endmacro %}

{% macro default__feed_cursor(alias, output, feed) %}
  {{ changefeed._unsupported_adapter('feed_cursor', 'consumer') }}
{% endmacro %}

{% macro spark__feed_cursor(alias, output, feed) %}
  {%- do changefeed._spark_scd_check_reprocess_selection() -%}
  {%- do changefeed._spark_claim_take() -%}
  {{ return(changefeed._spark_cursor_predicate(alias, output if output is not none else this, feed)) }}
{% endmacro %}
