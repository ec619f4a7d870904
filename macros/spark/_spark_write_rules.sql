{#-
  Validation for models that write a Spark feed (publish_feed) or a consumer output
  (feed_batch): the table must be written with one atomic commit per run
  (docs/protocol.md 11.2 and 11.6). Returns the normalised file format. Every error
  names the model, the bad setting and the config that works.

  parquet (the default):  materialized='incremental', incremental_strategy='insert_overwrite',
                          partition_by=['changefeed_batch'] and nothing else, no location_root
  delta / iceberg:        materialized='incremental', incremental_strategy='merge' with
                          unique_key=['shard_id', 'ulid'] (or 'append')
-#}
{% macro _spark_write_rules(macro_name) %}
  {%- set who = "changefeed." ~ macro_name ~ " in model '" ~ model.name ~ "'" -%}
  {%- set parquet_config = "materialized='incremental', incremental_strategy='insert_overwrite', partition_by=['changefeed_batch'], file_format='parquet'" -%}
  {%- set acid_config = "materialized='incremental', incremental_strategy='merge', unique_key=['shard_id', 'ulid']" -%}

  {%- set materialized = config.get('materialized') -%}
  {%- if materialized != 'incremental' -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": needs materialized='incremental' (got '" ~ materialized ~ "'); for parquet use "
        ~ parquet_config) }}
  {%- endif -%}

  {%- set file_format = (config.get('file_format') or 'parquet') | lower -%}
  {%- set strategy = (config.get('incremental_strategy') or 'append') | lower -%}
  {%- set partition_by = config.get('partition_by') -%}
  {%- if partition_by is string -%}{%- set partition_by = [partition_by] -%}{%- endif -%}
  {%- set partition_by = (partition_by or []) | map('lower') | list -%}

  {%- if file_format == 'parquet' -%}
    {%- if strategy != 'insert_overwrite' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": with file_format='parquet' the run must commit as one new partition, so it needs"
          ~ " incremental_strategy='insert_overwrite' (got '" ~ strategy ~ "'); use " ~ parquet_config) }}
    {%- endif -%}
    {%- if partition_by != ['changefeed_batch'] -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": with file_format='parquet' the table must be partitioned by changefeed_batch and"
          ~ " nothing else, so that each run commits exactly one partition (got partition_by="
          ~ (partition_by | string) ~ "); use " ~ parquet_config) }}
    {%- endif -%}
    {%- if config.get('location_root') -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": location_root makes the table external, and the first-run cleanup of a killed"
          ~ " run (docs/protocol.md 11.5) needs a managed table; remove location_root") }}
    {%- endif -%}
  {%- elif file_format in ['delta', 'iceberg'] -%}
    {%- if strategy == 'merge' -%}
      {%- set unique_key = config.get('unique_key') -%}
      {%- if unique_key is string -%}{%- set unique_key = [unique_key] -%}{%- endif -%}
      {%- set unique_key = (unique_key or []) | map('lower') | list -%}
      {%- if 'shard_id' not in unique_key or 'ulid' not in unique_key -%}
        {{ exceptions.raise_compiler_error(
            who ~ ": incremental_strategy='merge' must merge on the event, so unique_key must include"
            ~ " shard_id and ulid (got " ~ (unique_key | string) ~ "); use " ~ acid_config) }}
      {%- endif -%}
    {%- elif strategy != 'append' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": with file_format='" ~ file_format ~ "' use incremental_strategy='merge' (or 'append'),"
          ~ " got '" ~ strategy ~ "'; use " ~ acid_config) }}
    {%- endif -%}
  {%- else -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": file_format '" ~ file_format ~ "' is not supported; supported: parquet, delta and"
        ~ " iceberg") }}
  {%- endif -%}
  {{ return(file_format) }}
{% endmacro %}


{#- parquet only: readers must list registered partitions, never directories (11.1). -#}
{% macro _spark_check_partition_management(macro_name) %}
  {%- set rows = run_query('set spark.sql.hive.manageFilesourcePartitions') -%}
  {%- set value = (rows.rows[0][1] if rows.rows | length > 0 else 'true') | string | lower -%}
  {%- if value == 'false' -%}
    {{ exceptions.raise_compiler_error(
        "changefeed." ~ macro_name ~ ": spark.sql.hive.manageFilesourcePartitions is false, so Spark"
        ~ " would read unregistered partition directories (a killed run's output); set it to true"
        ~ " (the default)") }}
  {%- endif -%}
{% endmacro %}


{#-
  Everything a first write needs before dbt-spark creates the table (a first run or a
  --full-refresh after which the table is gone): on parquet, clear what a killed
  earlier create left at the table's location (docs/protocol.md 11.5). Runs only when
  dbt executes the model (run/build), never while compiling or parsing.
-#}
{% macro _spark_prepare_first_write(relation, file_format) %}
  {%- if not execute or file_format != 'parquet' -%}{{ return(none) }}{%- endif -%}
  {%- if (flags.WHICH or '') not in ['run', 'build', 'retry'] -%}{{ return(none) }}{%- endif -%}
  {%- if adapter.get_relation(relation.database, relation.schema, relation.identifier) is not none -%}
    {{ return(none) }}
  {%- endif -%}
  {%- do changefeed._spark_clear_orphan_location(relation) -%}
{% endmacro %}


{#- True while dbt renders a model for a unit test (the model's own table is not built). -#}
{% macro _spark_in_unit_test() %}
  {{ return(model.resource_type == 'unit_test' or config.get('materialized') == 'unit') }}
{% endmacro %}
