{#-
  feed_batch(): the `changefeed_batch` value of a feed consumer's run. Every consumer
  selects it, because its output commits one new partition per run (docs/protocol.md
  11.6): 1 on a first run or --full-refresh, else one more than the highest committed
  batch of the output (parquet: from its partition list, as a literal, no data read).

  It is also where the consumer's table config is checked (parquet:
  materialized='incremental', incremental_strategy='insert_overwrite',
  partition_by=['changefeed_batch']; delta/iceberg: merge on unique_key=['shard_id',
  'ulid'] or append), and, on a first run, where the location left by a killed earlier
  first run is cleared (11.5).

    select e.shard_id, e.ulid, e.order_id, e.changefeed_batch as changefeed_feed_batch,
           {{ changefeed.feed_batch() }} as changefeed_batch
-#}
{% macro feed_batch() %}
  {%- if not execute -%}{{ return('cast(1 as bigint)') }}{%- endif -%}
  {{ return(adapter.dispatch('feed_batch', 'changefeed')()) }}
{% endmacro %}

{% macro default__feed_batch() %}
  {{ changefeed._unsupported_adapter('feed_batch', 'consumer') }}
{% endmacro %}

{% macro spark__feed_batch() %}
  {#-- a dbt unit test renders the model without its table: nothing to check or clear --#}
  {%- if changefeed._spark_in_unit_test() -%}
    {{ return(changefeed._spark_next_batch_sql(this if is_incremental() else none)) }}
  {%- endif -%}
  {%- set file_format = changefeed._spark_write_rules('feed_batch') -%}
  {#-- before the output's batches are read: one run of the model at a time --#}
  {%- do changefeed._spark_claim_take() -%}
  {%- if file_format == 'parquet' -%}
    {%- do changefeed._spark_check_partition_management('feed_batch') -%}
  {%- endif -%}
  {%- if is_incremental() and file_format == 'parquet' -%}
    {{ return('cast(' ~ (changefeed._spark_last_batch(this) + 1) ~ ' as bigint)') }}
  {%- elif is_incremental() -%}
    {{ return(changefeed._spark_next_batch_sql(this)) }}
  {%- endif -%}
  {%- do changefeed._spark_prepare_first_write(this, file_format) -%}
  {{ return(changefeed._spark_next_batch_sql(none)) }}
{% endmacro %}
