{#-
  feed_cursor(alias, output=this): the cursor filter of a feed consumer, a predicate
  `<alias>.ulid > <cursor of the row's shard>`, where the cursor is the highest ULID of
  that shard in the consumer's own committed output (docs/protocol.md 11.6): cursor and
  output are the same rows, so they cannot disagree. Use it in the model's
  is_incremental() branch; on a first run or a --full-refresh the consumer reads from
  the start of the feed.

    {% if is_incremental() %}
      and {{ changefeed.feed_cursor('e') }}
    {% endif %}

  alias   the alias the FROM clause gives the feed
  output  the consumer's output (default: this); it must have shard_id and ulid columns
-#}
{% macro feed_cursor(alias, output=none) %}
  {%- do changefeed._spark_check_alias('feed_cursor', alias) -%}
  {%- if output is not none -%}
    {%- do changefeed._spark_check_relation('feed_cursor', 'output', output) -%}
  {%- endif -%}
  {%- if not execute -%}{{ return('true') }}{%- endif -%}
  {{ return(adapter.dispatch('feed_cursor', 'changefeed')(alias, output)) }}
{% endmacro %}

{% macro default__feed_cursor(alias, output) %}
  {{ changefeed._spark_unsupported('feed_cursor') }}
{% endmacro %}

{% macro spark__feed_cursor(alias, output) %}
  {{ return(changefeed._spark_cursor_predicate(alias, output if output is not none else this)) }}
{% endmacro %}
