{#-
  Validation of the state consumers, changefeed_current_state and changefeed_history
  (docs/spark.md, "Current state and history"; docs/protocol.md 11.8). Runs first, before
  any statement, so a wrong config changes nothing. Returns the checked settings:

    {'file_format': 'parquet' | 'delta' | 'iceberg', 'key_columns': [column, ...],
     'buckets': int, 'delete_when': SQL text or none, 'versions': 'batch' | 'event',
     'key_filter_limit': int, 'layout': 'rewrite' | 'layers' (parquet) or none,
     'max_layers': int, 'deletes': 'tombstone' | 'remove'}

  Every error names the model, the bad setting, the accepted values and a config that works.
-#}
{% macro _spark_scd_rules(materialization) %}
  {%- set who = "changefeed: model '" ~ model.name ~ "' (materialized='" ~ materialization ~ "')" -%}
  {%- set example = "config(materialized='" ~ materialization ~ "', unique_key=['order_id'], file_format='delta')" -%}

  {%- set file_format = (config.get('file_format') or 'parquet') | lower -%}
  {%- if file_format not in ['parquet', 'delta', 'iceberg'] -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": file_format '" ~ file_format ~ "' is not supported; accepted values: parquet, delta,"
        ~ " iceberg") }}
  {%- endif -%}

  {%- set keys = config.get('unique_key') -%}
  {%- if keys is string -%}{%- set keys = [keys] -%}{%- endif -%}
  {%- set bad = namespace(found=(not keys or keys is mapping or keys is not iterable)) -%}
  {%- for key in (keys if not bad.found else []) -%}
    {%- if key is not string or not modules.re.match('^[A-Za-z_][A-Za-z0-9_]*$', key) -%}
      {%- set bad.found = true -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if bad.found -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": unique_key must name the key column(s) of the state, a column name or a list of"
        ~ " them (got " ~ (keys | string) ~ "); e.g. " ~ example) }}
  {%- endif -%}
  {%- set keys = keys | map('lower') | list -%}
  {%- for reserved in ['shard_id', 'ulid', 'changefeed_feed_batch', 'changefeed_operation'] -%}
    {%- if reserved in keys -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": unique_key names the key of the source row, not the event; remove '" ~ reserved
          ~ "' from unique_key (got " ~ (keys | string) ~ ")") }}
    {%- endif -%}
  {%- endfor -%}

  {%- set buckets = config.get('buckets', 16) -%}
  {%- if buckets is not integer or buckets < 1 or buckets > 65536 -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": buckets must be a whole number from 1 to 65536 (got " ~ (buckets | string) ~ ")") }}
  {%- endif -%}

  {#- key_filter_limit (delta, iceberg): a MERGE of a run of at most this many events
      names the xxhash64 of each of its keys (_spark_scd_key_hashes); 0 never does. The
      list is part of the statement's text, about 20 characters a key. -#}
  {%- set key_filter_limit = config.get('key_filter_limit') -%}
  {%- if key_filter_limit is not none -%}
    {#- as buckets above: Jinja's integer test is false for booleans and floats -#}
    {%- if key_filter_limit is not integer or key_filter_limit < 0 or key_filter_limit > 1000000 -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": key_filter_limit must be a whole number from 0 to 1000000, the most events a"
          ~ " run may have for its MERGE to name each key (0: never); got "
          ~ (key_filter_limit | string)) }}
    {%- endif -%}
    {%- if file_format == 'parquet' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": key_filter_limit is a setting of delta and iceberg states (a parquet state"
          ~ " rewrites whole buckets and has no MERGE to filter); remove key_filter_limit or set"
          ~ " file_format='delta' or 'iceberg'") }}
    {%- endif -%}
  {%- endif -%}
  {%- set key_filter_limit = 100000 if key_filter_limit is none else key_filter_limit -%}

  {#- parquet_layout (a parquet current state): rewrite (default) rewrites the touched
      buckets of the state table; layers adds each run's rows as one layer of
      <model>__changefeed_layers and makes the model a view that resolves them
      (_spark_scd_layers.sql), compacting them into one layer once there are max_layers. -#}
  {%- set layout = config.get('parquet_layout') -%}
  {%- if layout is not none -%}
    {%- if layout is not string or layout not in ['rewrite', 'layers'] -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": parquet_layout must be one of rewrite, layers (got " ~ (layout | string) ~ ")") }}
    {%- endif -%}
    {%- if file_format != 'parquet' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": parquet_layout is a setting of parquet states (delta and iceberg merge with"
          ~ " row-level deletes); remove parquet_layout or set file_format='parquet'") }}
    {%- endif -%}
    {%- if layout == 'layers' and materialization != 'changefeed_current_state' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": parquet_layout='layers' is a setting of materialized='changefeed_current_state'"
          ~ " (a history rewrites the touched buckets); remove parquet_layout, or use"
          ~ " file_format='delta' or 'iceberg' for a large history with scattered changes") }}
    {%- endif -%}
  {%- endif -%}
  {%- set layout = (layout or 'rewrite') if file_format == 'parquet' else none -%}

  {%- set max_layers = config.get('max_layers') -%}
  {%- if max_layers is not none -%}
    {%- if layout != 'layers' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": max_layers is a setting of parquet_layout='layers' (file_format='parquet'); remove"
          ~ " max_layers or set parquet_layout='layers'") }}
    {%- endif -%}
    {%- if max_layers is not integer or max_layers < 2 or max_layers > 1000 -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": max_layers must be a whole number from 2 to 1000, the most layers the state"
          ~ " keeps before a run compacts them into one; got " ~ (max_layers | string)) }}
    {%- endif -%}
  {%- endif -%}
  {%- set max_layers = 16 if max_layers is none else max_layers -%}

  {%- set delete_when = config.get('delete_when') -%}
  {%- if delete_when is not none and (delete_when is not string or delete_when | trim == '') -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": delete_when must be a SQL condition over the model's columns, e.g. \"status ="
        ~ " 'deleted'\" (got " ~ (delete_when | string) ~ ")") }}
  {%- endif -%}

  {#- versions (history): one version per key and feed batch (a landed feed without row
      images carries one row per key and landing) or per event (with row images each event
      is the row as of its write, so history is exact). -#}
  {%- set versions = config.get('versions') -%}
  {%- if versions is not none and materialization != 'changefeed_history' -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": versions is a setting of materialized='changefeed_history' only (the current state"
        ~ " keeps one row per key); remove versions") }}
  {%- endif -%}
  {%- set versions = versions if versions is not none else 'batch' -%}
  {%- if versions not in ['batch', 'event'] -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": versions must be one of batch, event (got " ~ (versions | string) ~ "); use event for"
        ~ " a feed set up with row_image: true, e.g. config(materialized='changefeed_history',"
        ~ " unique_key=['order_id'], versions='event')") }}
  {%- endif -%}

  {#- deletes: tombstone (default) keeps a deleted key as a row with changefeed_deleted =
      true in the model; remove keeps the tombstones in the state table
      <model>__changefeed_state and makes the model a view of the rows that are not
      deleted (history: of the versions that are not deletes). -#}
  {%- set deletes = config.get('deletes') -%}
  {%- if deletes is not none and (deletes is not string or deletes not in ['tombstone', 'remove']) -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": deletes must be one of tombstone, remove (got " ~ (deletes | string) ~ "); remove"
        ~ " leaves deleted keys out of the model, e.g. config(materialized='" ~ materialization
        ~ "', unique_key=['order_id'], file_format='delta', deletes='remove')") }}
  {%- endif -%}
  {%- set deletes = deletes or 'tombstone' -%}

  {%- for owned in ['partition_by', 'incremental_strategy', 'location_root'] -%}
    {%- if config.get(owned) -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": " ~ owned ~ " is not a setting of this materialization (it partitions the state"
          ~ " by changefeed_bucket and writes it itself, as a managed table); remove " ~ owned) }}
    {%- endif -%}
  {%- endfor -%}

  {{ return({'file_format': file_format, 'key_columns': keys, 'buckets': buckets | int,
             'delete_when': delete_when, 'versions': versions,
             'key_filter_limit': key_filter_limit | int, 'layout': layout,
             'max_layers': max_layers | int, 'deletes': deletes}) }}
{% endmacro %}


{#- The checks that need the model's select: the columns every event must carry and the
    names the state reserves. `columns` are the select's column names, lower case. -#}
{% macro _spark_scd_check_columns(materialization, columns, keys) %}
  {%- set who = "changefeed: model '" ~ model.name ~ "' (materialized='" ~ materialization ~ "')" -%}
  {%- for needed in ['shard_id', 'ulid', 'changefeed_feed_batch'] + keys -%}
    {%- if needed not in columns -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": the select has no column " ~ needed ~ "; a state consumer selects the event's"
          ~ " shard_id, ulid and changefeed_feed_batch and the unique_key columns, e.g. select e.*"
          ~ " from changefeed.feed_events(source('landing', 'orders_feed'), this) as e (got: "
          ~ columns | join(', ') ~ ")") }}
    {%- endif -%}
  {%- endfor -%}
  {%- for reserved in changefeed._spark_scd_added_columns(materialization) + ['changefeed_batch']
      + (['changefeed_repeat'] if materialization == 'changefeed_history' else []) -%}
    {%- if reserved in columns -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": the select may not return a column named " ~ reserved ~ " (the state adds it;"
          ~ " the feed's batch is changefeed_feed_batch, as feed_events() names it); rename or drop it") }}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}


{#- The columns the state adds after the select's, in table order (the bucket last: it is
    the partition column). -#}
{% macro _spark_scd_added_columns(materialization) %}
  {%- if materialization == 'changefeed_history' -%}
    {{ return(['changefeed_deleted', 'valid_from', 'valid_to', 'changefeed_bucket']) }}
  {%- endif -%}
  {{ return(['changefeed_deleted', 'changefeed_bucket']) }}
{% endmacro %}
