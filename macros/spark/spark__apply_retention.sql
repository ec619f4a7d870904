{#-
  apply_retention on a Spark feed (the dispatcher is macros/apply_retention.sql; the rule is
  docs/protocol.md 11.7, the same as changefeed.spark.feedtable.retain):

  * whole batches go, oldest first, so the kept batches stay a contiguous range and the
    horizon is the oldest kept batch minus 1 (derived from the partition list, not stored);
  * a batch is kept if it holds an event younger than max_age_seconds, one of a shard's
    newest keep_last events, or a shard's head (its newest event: publishers and landings
    derive their state from it), or, unless override_consumers, if it lies above a
    consumer's cursor;
  * the consumers are the project's models that read the feed with feed_safe_point,
    feed_cursor or feed_events, and the tables listed in the feed's meta
    changefeed_consumers (consumers outside the project). A state model's cursor
    (changefeed_current_state, changefeed_history) is the newest row of its cursor table,
    <state>__changefeed_cursor (11.8), which retention reads where it exists. A feed that
    is not a model or source of the project, or a consumer whose cursor cannot be read,
    makes retention refuse unless override_consumers.
-#}
{% macro spark__apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- do changefeed._feed_retention_policy_check(max_age_seconds, keep_last, override_consumers, shard) -%}
  {%- if shard is not none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention on Spark removes whole batches, and a batch holds the events of"
        ~ " every shard written in one run, so shard must be left out; got: " ~ shard) }}
  {%- endif -%}
  {%- set named = changefeed._spark_named_relation(relation) -%}
  {%- set feed = adapter.get_relation(none, named.schema, named.identifier) -%}
  {%- if feed is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention: the feed table " ~ named ~ " does not exist; check the relation"
        ~ " (a landed feed's table, or a model that calls publish_feed)") }}
  {%- endif -%}
  {%- do run_query('refresh table ' ~ feed) -%}
  {%- set low, newest = changefeed._spark_batch_range(feed) -%}
  {%- set consumers = [] if override_consumers else changefeed._spark_retention_consumers(feed) -%}
  {%- set result = {'feed': feed | string, 'removed_batches': 0, 'horizon': [low - 1, 0] | max,
      'oldest_batch': low or none, 'newest_batch': newest or none, 'held_for_consumers': 0,
      'slowest_consumer': none, 'held_for_head': 0, 'head_shard': none} -%}
  {%- if newest > 0 -%}
    {%- do result.update(changefeed._spark_retention_run(feed, low, newest, max_age_seconds, keep_last, consumers)) -%}
  {%- endif -%}
  {%- do log(changefeed._spark_retention_line(result), info=true) -%}
  {{ return(result) }}
{% endmacro %}


{#- Plan and remove; the keys of apply_retention's result that depend on the plan. -#}
{% macro _spark_retention_run(feed, low, newest, max_age_seconds, keep_last, consumers) %}
  {%- set rows = run_query(changefeed._spark_retention_plan_sql(feed, newest, max_age_seconds, keep_last)).rows -%}
  {%- set policy = [newest - 1] -%}{#- the newest batch always stays (C7) -#}
  {%- if max_age_seconds is not none -%}
    {%- set young = rows | map(attribute='young_from') | reject('none') | map('int') | list -%}
    {%- do policy.append((young | min - 1) if young else newest) -%}
  {%- endif -%}
  {%- if keep_last is not none -%}
    {%- do policy.append((rows | map(attribute='keep_from') | map('int') | min) - 1) -%}
  {%- endif -%}
  {%- set wanted = policy | min -%}
  {%- set head = namespace(batch=none, shard=none) -%}
  {%- for row in rows | sort(attribute='s') -%}
    {%- if head.batch is none or (row['last_batch'] | int) < head.batch -%}
      {%- set head.batch = row['last_batch'] | int -%}{%- set head.shard = row['s'] | int -%}
    {%- endif -%}
  {%- endfor -%}
  {%- set cut = [wanted, head.batch - 1] | min -%}
  {%- set slowest = (consumers | sort(attribute='name') | sort(attribute='consumed') | first) if consumers else none -%}
  {%- set consumer_limit = slowest['consumed'] if slowest is not none else cut -%}
  {%- set upto = [cut, consumer_limit] | min -%}
  {%- if upto >= low -%}
    {%- do changefeed._spark_retention_remove(feed, low, upto) -%}
  {%- endif -%}
  {{ return({
      'removed_batches': [0, upto - low + 1] | max,
      'horizon': [low - 1, upto] | max,
      'oldest_batch': [low - 1, upto] | max + 1,
      'held_for_consumers': [0, cut - ([consumer_limit, low - 1] | max)] | max,
      'slowest_consumer': slowest['name'] if slowest is not none and cut > consumer_limit and cut >= low else none,
      'held_for_head': [0, wanted - ([head.batch - 1, low - 1] | max)] | max,
      'head_shard': head.shard if wanted > head.batch - 1 and wanted >= low else none,
  }) }}
{% endmacro %}


{#- Per shard: its newest batch (its head), the oldest batch its newest keep_last events
    need, and its oldest batch holding an event younger than max_age_seconds; one scan of
    shard_id and ulid (the Python twin is changefeed.spark.feedtable's plan_sql). -#}
{% macro _spark_retention_plan_sql(feed, newest, max_age_seconds, keep_last) %}
  {%- set young = 'cast(null as bigint)' if max_age_seconds is none else
      'min(case when ms >= unix_millis(current_timestamp()) - ' ~ (max_age_seconds * 1000) ~ ' then b end)' -%}
  {%- if keep_last is none -%}
    {%- set keep = 'cast(null as bigint)' -%}
  {%- elif keep_last == 0 -%}
    {%- set keep = 'cast(' ~ (newest + 1) ~ ' as bigint)' -%}{#- no batch is needed for no event -#}
  {%- else -%}
    {%- set keep = 'coalesce(max(case when newer >= ' ~ keep_last ~ ' then b end), min(b))' -%}
  {%- endif -%}
  {{ return(
      'select s, max(b) as last_batch, ' ~ keep ~ ' as keep_from, ' ~ young ~ ' as young_from from ('
      ~ ' select s, b, ms, sum(n) over (partition by s order by b desc'
      ~ ' rows between unbounded preceding and current row) as newer from ('
      ~ '  select shard_id as s, changefeed_batch as b, count(*) as n,'
      ~ '  cast(conv(hex(substring(max(ulid), 1, 6)), 16, 10) as bigint) as ms'
      ~ '  from ' ~ feed ~ ' where changefeed_batch <= ' ~ newest
      ~ '  group by shard_id, changefeed_batch)) group by s') }}
{% endmacro %}


{#- parquet: one partition per statement, oldest first, so a killed run leaves the kept
    batches contiguous; delta/iceberg: one delete, one transaction. -#}
{% macro _spark_retention_remove(feed, low, upto) %}
  {%- if changefeed._spark_is_acid(feed) -%}
    {%- do run_query('delete from ' ~ feed ~ ' where changefeed_batch <= ' ~ upto) -%}
  {%- else -%}
    {%- for batch in range(low, upto + 1) -%}
      {%- do run_query('alter table ' ~ feed ~ ' drop if exists partition (changefeed_batch = ' ~ batch ~ ')') -%}
    {%- endfor -%}
  {%- endif -%}
{% endmacro %}


{#- [{name, consumed}] of every consumer of `feed` retention knows; refuses (compiler error)
    when there may be one whose cursor it cannot read. -#}
{% macro _spark_retention_consumers(feed) %}
  {%- set fix = " Or pass override_consumers: true to remove the batches anyway (those consumers then fail with"
      ~ " 'fell behind retention' and need dbt run --full-refresh)." -%}
  {%- set feed_ids = [] -%}
  {%- set listed = [] -%}
  {%- for node in (graph.nodes.values() | list) + (graph.sources.values() | list) -%}
    {%- set identifier = node.identifier if node.resource_type == 'source' else node.alias -%}
    {%- if node.resource_type in ['model', 'source'] and (node.schema | lower) == (feed.schema | lower)
          and (identifier | lower) == (feed.identifier | lower) -%}
      {%- do feed_ids.append(node.unique_id) -%}
      {%- set meta = node.meta or ((node.config or {}).get('meta')) or {} -%}
      {%- do listed.extend(meta.get('changefeed_consumers') or []) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if not feed_ids -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention: " ~ feed ~ " is not a model or source of this project, so"
        ~ " retention cannot find its consumers; run it in the project that declares the feed (a source,"
        ~ " with meta changefeed_consumers listing consumer tables outside the project)." ~ fix) }}
  {%- endif -%}
  {%- set readers = ['macro.changefeed.feed_safe_point', 'macro.changefeed.feed_cursor', 'macro.changefeed.feed_events'] -%}
  {%- set other_feeds = changefeed._health_feeds() | rejectattr('unique_id', 'in', feed_ids) | map(attribute='unique_id') | list -%}
  {%- set found = [] -%}
  {%- for node in graph.nodes.values() | sort(attribute='unique_id') -%}
    {%- if node.resource_type == 'model' and (node.depends_on.nodes | select('in', feed_ids) | list)
          and (node.depends_on.macros | select('in', readers) | list) -%}
      {%- if node.depends_on.nodes | select('in', other_feeds) | list -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: apply_retention: the consumer " ~ node.name ~ " reads " ~ feed ~ " and other feeds,"
            ~ " so which feed its cursor belongs to is unknown and retention cannot keep what it has not read." ~ fix) }}
      {%- endif -%}
      {%- do found.append({'name': node.name, 'relation': adapter.get_relation(node.database, node.schema, node.alias),
          'file_format': (node.config.get('file_format') or 'parquet') | lower,
          'state': node.config.materialized in ['changefeed_current_state', 'changefeed_history']}) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- for name in listed -%}
    {%- set named = changefeed._spark_named_relation(name) -%}
    {#-- its kind and format unknown: a state's cursor table, if it has one, says it is a
         state; that table is read as a table format's (newest row first) --#}
    {%- do found.append({'name': name, 'relation': adapter.get_relation(none, named.schema, named.identifier),
        'file_format': 'any', 'state': none}) -%}
  {%- endfor -%}
  {%- set consumers = [] -%}
  {%- for consumer in found -%}
    {#-- a state model (changefeed_current_state, changefeed_history) keeps its cursor in a
         table of its own, <state>__changefeed_cursor (11.8), not in its output --#}
    {%- set state_cursor = none if consumer.relation is none or consumer.state is sameas false
        else changefeed._spark_scd_cursor_row(changefeed._spark_scd_cursor_relation(consumer.relation),
                                              consumer.file_format) -%}
    {%- if consumer.relation is none -%}
      {#-- not built yet: its first run reads the whole feed, so keep the whole feed --#}
      {%- do consumers.append({'name': consumer.name, 'consumed': 0}) -%}
    {%- elif consumer.state or state_cursor is not none -%}
      {%- do consumers.append({'name': consumer.name, 'consumed': state_cursor.feed_batch if state_cursor is not none else 0}) -%}
    {%- else -%}
      {%- set names = adapter.get_columns_in_relation(consumer.relation) | map(attribute='name') | map('lower') | list -%}
      {%- if 'changefeed_feed_batch' not in names -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: apply_retention: the consumer " ~ consumer.name ~ " of " ~ feed ~ " has no column"
            ~ " changefeed_feed_batch, so its cursor is unknown and retention cannot keep what it has not"
            ~ " read; add the column (docs/spark.md) and rebuild it with dbt run --full-refresh." ~ fix) }}
      {%- endif -%}
      {%- do consumers.append({'name': consumer.name, 'consumed': changefeed._spark_consumed_batch(consumer.relation)}) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(consumers) }}
{% endmacro %}


{#- The feed as apply_retention accepts it: 'schema.table', {schema: ..., table: ...} or a
    relation. Spark has no database level (dbt-spark refuses one), so there is none here. -#}
{% macro _spark_named_relation(relation) %}
  {%- if relation is string and relation.split('.') | length == 2 and relation.split('.') | select | list | length == 2 -%}
    {{ return(api.Relation.create(schema=relation.split('.')[0], identifier=relation.split('.')[1])) }}
  {%- elif relation is not none and relation is not string and relation.render is defined and relation.identifier is defined -%}
    {{ return(relation) }}
  {%- elif relation is mapping and relation.get('schema') and relation.get('table') -%}
    {{ return(api.Relation.create(schema=relation['schema'], identifier=relation['table'])) }}
  {%- endif -%}
  {{ exceptions.raise_compiler_error(
      "changefeed: apply_retention on Spark: relation must be 'schema.table', {schema: ..., table: ...}"
      ~ " or a relation such as ref('orders_published'); got: " ~ relation) }}
{% endmacro %}


{% macro _spark_retention_line(result) %}
  {%- set text = result.feed ~ ": removed " ~ result.removed_batches ~ " batch(es)" -%}
  {%- if result.newest_batch is none -%}{{ return(result.feed ~ ": no batches yet") }}{%- endif -%}
  {%- set text = text ~ "; keeps batches " ~ result.oldest_batch ~ " to " ~ result.newest_batch ~ " (horizon " ~ result.horizon ~ ")" -%}
  {%- if result.slowest_consumer is not none -%}
    {%- set text = text ~ "; kept " ~ result.held_for_consumers ~ " more for consumer " ~ result.slowest_consumer
        ~ ", which has not read them (override_consumers removes them)" -%}
  {%- endif -%}
  {%- if result.head_shard is not none -%}
    {%- set text = text ~ "; kept " ~ result.held_for_head ~ " more for the head of shard " ~ result.head_shard
        ~ ", which has not written since (its newest batch stays)" -%}
  {%- endif -%}
  {{ return(text) }}
{% endmacro %}
