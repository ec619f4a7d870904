{#-
  publish_feed(): makes a dbt-spark model a feed. Wrap the model's select in a call
  block; every run appends the rows the select returns as one batch, each row with its
  shard_id and a ULID from one block per shard and run (docs/protocol.md 11.4):

    {{ config(materialized='incremental', incremental_strategy='insert_overwrite',
              partition_by=['changefeed_batch'], file_format='parquet',
              changefeed={'key': ['order_id']}) }}
    {% call changefeed.publish_feed() %}
    select order_id, status, updated_at from {{ ref('stg_orders') }}
    {% if is_incremental() %}
    where updated_at > coalesce((select max(updated_at) from {{ this }}), timestamp'1970-01-01')
    {% endif %}
    {% endcall %}

  The model's table is the feed: columns shard_id, ulid, the select's columns,
  changefeed_batch. The run commits when its one new partition is registered, so a run
  killed at any moment exposes nothing, and its re-run writes the same batch.

  config changefeed:
    key        column name(s): the order of ULIDs within a run (required)
    shard      SQL expression over the select's columns giving the shard (default 0)
    time_hint  SQL expression, epoch milliseconds (default: now); the feed never goes back in time
-#}
{% macro publish_feed() %}
  {%- if caller is not defined -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.publish_feed wraps the model's select: {% call changefeed.publish_feed() %} select ... {% endcall %}") }}
  {%- endif -%}
  {%- set sql = caller() -%}
  {%- if not execute -%}{{ return(sql) }}{%- endif -%}
  {{ return(adapter.dispatch('publish_feed', 'changefeed')(sql)) }}
{% endmacro %}

{% macro default__publish_feed(sql) %}
  {{ changefeed._unsupported_adapter('publish_feed', 'consumer') }}
{% endmacro %}

{% macro spark__publish_feed(sql) %}
  {%- set options = changefeed._spark_publish_options(changefeed._feed_model_config()) -%}
  {%- set incremental = is_incremental() -%}
  {#-- a dbt unit test renders the model without its table: nothing to check or clear --#}
  {%- if not changefeed._spark_in_unit_test() -%}
    {%- set file_format = changefeed._spark_write_rules('publish_feed') -%}
    {%- if file_format == 'parquet' -%}
      {%- do changefeed._spark_check_partition_management('publish_feed') -%}
    {%- endif -%}
    {%- if not incremental -%}
      {%- do changefeed._spark_prepare_first_write(this, file_format) -%}
    {%- endif -%}
  {%- endif -%}

  {#-- the select's columns: none reserved, every key column present --#}
  {%- set columns = get_columns_in_query(sql) -%}
  {%- set lowered = columns | map('lower') | list -%}
  {%- for reserved in ['shard_id', 'ulid', 'changefeed_batch'] -%}
    {%- if reserved in lowered -%}
      {{ exceptions.raise_compiler_error(
          "changefeed.publish_feed in model '" ~ model.name ~ "': the select may not return a column named "
          ~ reserved ~ " (reserved for the feed; use the 'shard' option for shards)") }}
    {%- endif -%}
  {%- endfor -%}
  {%- for column in options['key'] -%}
    {%- if column | lower not in lowered -%}
      {{ exceptions.raise_compiler_error(
          "changefeed.publish_feed in model '" ~ model.name ~ "': key column '" ~ column
          ~ "' is not among the select's columns: " ~ columns | join(', ')) }}
    {%- endif -%}
  {%- endfor -%}

  {{ return(changefeed._spark_publish_sql(
      sql, columns, options['key'], options['shard'], options['time_hint'],
      this.identifier | lower, this if incremental else none)) }}
{% endmacro %}
