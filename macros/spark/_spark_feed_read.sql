{#-
  Reading a Spark feed (docs/protocol.md 11.3 and 11.6) from metadata and the newest
  partitions only, so that a consumer's run costs what its new events cost, whatever the
  size of the feed or of its own output:

  * the safe point is the feed's newest registered batch M (its partition list in the
    metastore: no data read). Batches are monotonic per shard (F3), so `changefeed_batch
    <= M` is exactly `ulid <= head of the shard` for every shard;
  * the cursor is the feed batch P that the consumer has consumed up to: the highest
    `changefeed_feed_batch` in its output's newest partition (output batches only move
    forward, so that partition holds the highest);
  * both are rendered as literal bounds on the feed's partition column, so Spark reads
    the partitions in (P, M] and no other.
-#}

{#- The highest registered changefeed_batch of `relation`; 0 if it has none or does not exist. -#}
{% macro _spark_last_batch(relation) %}
  {{ return(changefeed._spark_batch_range(relation)[1]) }}
{% endmacro %}


{#- [lowest, highest] registered changefeed_batch of `relation`; [0, 0] if it has none or does
    not exist. parquet: the metastore's partition list, no data read. delta/iceberg: select
    min/max(changefeed_batch), answered from their file statistics. Retention removes
    batches from the bottom only (protocol 11.7), so the lowest minus 1 is the horizon. -#}
{% macro _spark_batch_range(relation) %}
  {%- set found = adapter.get_relation(relation.database, relation.schema, relation.identifier) -%}
  {%- if found is none and '.' in relation.schema -%}
    {#-- dbt-spark cannot list a catalog-qualified schema (spark_catalog.<schema> while the
         session's current catalog is Iceberg's, docs/spark.md): ask Spark --#}
    {%- set found = relation if changefeed._spark_table_listed(relation) else none -%}
  {%- endif -%}
  {%- if found is none -%}{{ return([0, 0]) }}{%- endif -%}
  {%- if changefeed._spark_is_acid(found) -%}
    {%- set row = run_query('select min(changefeed_batch), max(changefeed_batch) from ' ~ relation).rows[0] -%}
    {{ return([(row[0] or 0) | int, (row[1] or 0) | int]) }}
  {%- endif -%}
  {%- set last = namespace(batch=0, low=none) -%}
  {%- for spec in changefeed._spark_partitions(relation) -%}
    {%- set key, _, value = spec.partition('=') -%}
    {%- if key | lower != 'changefeed_batch' or '/' in value -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: " ~ relation ~ " has the partition '" ~ spec ~ "'; a Spark feed and a"
          ~ " consumer's output are partitioned by changefeed_batch and nothing else"
          ~ " (docs/protocol.md 11.1)") }}
    {%- endif -%}
    {%- if value | int > last.batch -%}{%- set last.batch = value | int -%}{%- endif -%}
    {%- if last.low is none or value | int < last.low -%}{%- set last.low = value | int -%}{%- endif -%}
  {%- endfor -%}
  {{ return([last.low or 0, last.batch]) }}
{% endmacro %}


{#- Fails in one line when the feed a consumer reads is not in the session's catalog, with
    the likely cause: a session whose catalog is its own (an embedded Derby metastore, or
    none: dbt-spark's method: session without SPARK_CONF_DIR makes a metastore_db/ in the
    current directory) instead of the shared one the landing writes to; otherwise the feed
    is not landed yet or the source names another table. Without this, Spark's
    TABLE_OR_VIEW_NOT_FOUND named neither. -#}
{% macro _spark_require_feed(caller_name, feed) %}
  {#-- a dbt unit test's feed is its given rows, not a table --#}
  {%- if changefeed._spark_in_unit_test() -%}{{ return(none) }}{%- endif -%}
  {%- set parts = feed.schema.split('.') -%}
  {%- set schemas = run_query('show schemas' ~ (' in ' ~ parts[0] if parts | length > 1 else '')
      ~ " like '" ~ parts[-1] ~ "'") -%}
  {%- if schemas.rows | length > 0
        and changefeed._spark_table_listed(feed) -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set who = 'changefeed.' ~ caller_name ~ ': the feed ' ~ feed -%}
  {%- set conf = env_var('SPARK_CONF_DIR', '') -%}
  {%- set catalog = run_query('set spark.sql.catalogImplementation').rows[0][1] | string -%}
  {%- set url = run_query('set spark.hadoop.javax.jdo.option.ConnectionURL').rows[0][1] | string -%}
  {%- if catalog != 'hive' or url == '<undefined>' or url.startswith('jdbc:derby') -%}
    {{ exceptions.raise_compiler_error(
        who ~ " is not in this Spark session's catalog, which is one of its own (an embedded Derby"
        ~ " metastore, metastore_db/ in the directory it started in: delete it), not the shared one"
        ~ " the landing writes to; " ~ ("SPARK_CONF_DIR is not set: set it to the shared catalog's"
        ~ " conf directory (. ./env.sh, or the export line that changefeed catalog init prints)"
        if conf == '' else "SPARK_CONF_DIR=" ~ conf ~ " configures no shared metastore: run"
        ~ " changefeed catalog init and set SPARK_CONF_DIR to the conf directory it prints")
        ~ ", then run again") }}
  {%- endif -%}
  {{ exceptions.raise_compiler_error(
      who ~ " is not in the catalog (" ~ url ~ "); land it first (changefeed land --table " ~ feed
      ~ " ...), or correct the schema and name of the model's source") }}
{% endmacro %}


{#- C5 on Spark (protocol 11.7): a consumer that has consumed the feed up to batch
    `consumed` reads (consumed, M]; if retention removed batches above `consumed`, that
    window has a hole, so fail rather than skip. Costs the feed's partition list. -#}
{% macro _spark_check_retention(feed, consumed, output) %}
  {%- set low = changefeed._spark_batch_range(feed)[0] -%}
  {%- if low > 0 and consumed < low - 1 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the consumer " ~ output ~ " fell behind retention on feed " ~ feed
        ~ ": it has consumed the feed up to batch " ~ consumed ~ ", but retention removed every batch up to "
        ~ (low - 1) ~ " (the horizon), so reading on would skip the events of the removed batches above "
        ~ consumed ~ ". Fix: rebuild it from the feed's oldest kept batch with"
        ~ " dbt run --full-refresh --select " ~ output.identifier ~ " (docs/operations.md, Retention)") }}
  {%- endif -%}
{% endmacro %}


{#- The feed a consumer model reads, for feed_cursor (which is given only the alias): its one
    dependency (ref or source) that is a feed table, i.e. has shard_id, ulid and
    changefeed_batch but no changefeed_feed_batch. none if it has none. -#}
{% macro _spark_feed_of_model() %}
  {%- set feeds = [] -%}
  {%- for unique_id in model.depends_on.nodes -%}
    {%- set node = graph.nodes.get(unique_id) or graph.sources.get(unique_id) -%}
    {%- if node is not none and node.resource_type in ['model', 'source', 'seed', 'snapshot'] -%}
      {%- set found = adapter.get_relation(node.database, node.schema, node.identifier if node.resource_type == 'source' else node.alias) -%}
      {%- if found is not none -%}
        {%- set names = adapter.get_columns_in_relation(found) | map(attribute='name') | map('lower') | list -%}
        {%- if 'shard_id' in names and 'ulid' in names and 'changefeed_batch' in names and 'changefeed_feed_batch' not in names -%}
          {%- do feeds.append(found) -%}
        {%- endif -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if feeds | length > 1 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.feed_cursor in model '" ~ model.name ~ "': the model reads several feeds ("
        ~ feeds | join(', ') ~ "), so the feed whose retention horizon the cursor must be checked"
        ~ " against is ambiguous; name it: feed_cursor('e', feed=ref('...'))") }}
  {%- endif -%}
  {{ return(feeds[0] if feeds else none) }}
{% endmacro %}


{#- `<alias>.changefeed_batch <= M`, M the feed's newest batch; false for an empty feed. -#}
{% macro _spark_safe_point_predicate(last_batch, alias) %}
  {%- if last_batch == 0 -%}{{ return('false') }}{%- endif -%}
  {{ return('(' ~ alias ~ '.changefeed_batch <= ' ~ last_batch ~ ')') }}
{% endmacro %}


{#- `<alias>.changefeed_batch > P`, P the feed batch the consumer has consumed up to. In a
    dbt unit test `output` is the test's rows, so P is computed in the query itself. -#}
{% macro _spark_cursor_predicate(alias, output, feed) %}
  {%- if changefeed._spark_in_unit_test() -%}
    {{ return('(' ~ alias ~ '.changefeed_batch > (select coalesce(max(changefeed_feed_batch), 0) from '
        ~ output ~ '))') }}
  {%- endif -%}
  {%- if changefeed._spark_scd_is_own_state(output) -%}
    {#-- a state consumer's cursor is committed after its state, in a table of its own (11.8) --#}
    {%- set consumed = changefeed._spark_scd_consumed_batch(output) -%}
  {%- else -%}
    {%- set consumed = changefeed._spark_consumed_batch(output) -%}
  {%- endif -%}
  {#-- consumed 0: nothing read yet, so like a first run it reads from the oldest kept batch --#}
  {%- if consumed > 0 -%}
    {%- set feed = feed if feed is not none else changefeed._spark_feed_of_model() -%}
    {%- if feed is not none -%}
      {%- do changefeed._spark_check_retention(feed, consumed, output) -%}
    {%- endif -%}
  {%- endif -%}
  {{ return('(' ~ alias ~ '.changefeed_batch > ' ~ consumed ~ ')') }}
{% endmacro %}


{#- The highest changefeed_feed_batch of the output's newest batch; 0 for an empty output. -#}
{% macro _spark_consumed_batch(output) %}
  {%- set found = adapter.get_relation(output.database, output.schema, output.identifier) -%}
  {%- if found is none -%}{{ return(0) }}{%- endif -%}
  {%- set names = adapter.get_columns_in_relation(output) | map(attribute='name') | map('lower') | list -%}
  {%- if 'changefeed_feed_batch' not in names -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.feed_cursor: the output " ~ output ~ " has no column changefeed_feed_batch."
        ~ " A consumer's cursor is the feed batch it has consumed up to, read from its output:"
        ~ " select e.changefeed_batch as changefeed_feed_batch (feed_events() returns it as"
        ~ " changefeed_feed_batch; an aggregating consumer selects max(e.changefeed_batch)), then"
        ~ " rebuild the output once with dbt run --full-refresh (docs/spark.md)") }}
  {%- endif -%}
  {%- if changefeed._spark_is_acid(found) -%}
    {%- set sql = 'select max(changefeed_feed_batch) from ' ~ output -%}
  {%- else -%}
    {%- set newest = changefeed._spark_last_batch(output) -%}
    {%- if newest == 0 -%}{{ return(0) }}{%- endif -%}
    {%- set sql = 'select max(changefeed_feed_batch) from ' ~ output ~ ' where changefeed_batch = ' ~ newest -%}
  {%- endif -%}
  {%- set value = run_query(sql).rows[0][0] -%}
  {%- if value is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed.feed_cursor: the newest rows of " ~ output ~ " have no changefeed_feed_batch, so"
        ~ " the consumer's cursor is unknown; every output row must carry the feed batch of the"
        ~ " event it consumed (e.changefeed_batch, or max(e.changefeed_batch) when aggregating)") }}
  {%- endif -%}
  {{ return(value | int) }}
{% endmacro %}


{#- The consumer's next batch number: 1 on a first run, else one more than its highest. -#}
{% macro _spark_next_batch_sql(output) %}
  {%- if output is none -%}
    {{ return('cast(1 as bigint)') }}
  {%- endif -%}
  {{ return('(select coalesce(max(changefeed_batch), 0) + 1 from ' ~ output ~ ')') }}
{% endmacro %}


{#- Argument checks shared by the public macros. -#}
{% macro _spark_check_alias(macro_name, alias) %}
  {%- if alias is not string or not modules.re.match('^[A-Za-z_][A-Za-z0-9_]*$', alias) -%}
    {{ exceptions.raise_compiler_error(
        "changefeed." ~ macro_name ~ ": alias must be the table alias the model gives the feed"
        ~ " in its FROM clause, a plain identifier such as 'e'; got: " ~ alias) }}
  {%- endif -%}
{% endmacro %}


{% macro _spark_check_relation(macro_name, arg_name, value) %}
  {%- if value is none or value is string or value.identifier is not defined -%}
    {{ exceptions.raise_compiler_error(
        "changefeed." ~ macro_name ~ ": " ~ arg_name ~ " must be a relation such as ref('my_model'),"
        ~ " source('landing', 'orders_feed') or this; got: " ~ value) }}
  {%- endif -%}
{% endmacro %}
