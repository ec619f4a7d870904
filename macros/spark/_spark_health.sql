{#-
  The SQL of the feed-health models (models/changefeed_*_health.sql), built from the
  dbt graph when the model runs:

  * feeds: models that call changefeed.publish_feed (kind 'published') and sources with
    meta {changefeed_feed: true} (kind 'landed');
  * consumers: models that call feed_safe_point, feed_cursor or feed_events, each with
    the one feed among its dependencies (a consumer depending on several feeds is
    skipped with a warning: its shard_id/ulid columns belong to one of them).

  Feeds and consumers whose table does not exist yet are left out; re-run the health
  models to pick them up. Spark feeds commit atomically, so safe point = head (11.3).
-#}

{% macro _health_check_adapter(model_name) %}
  {%- if execute and adapter.type() not in ['spark', 'databricks'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the health model " ~ model_name ~ " supports the spark (and databricks)"
        ~ " adapter, not '" ~ adapter.type() ~ "'; PostgreSQL and SQL Server feeds report their"
        ~ " safe points with safe_point:<feed> (docs/protocol.md section 6)") }}
  {%- endif -%}
{% endmacro %}


{#- [{unique_id, name, kind, relation}] of the feeds in the graph whose table exists. -#}
{% macro _health_feeds() %}
  {%- set feeds = [] -%}
  {%- if not execute -%}{{ return(feeds) }}{%- endif -%}
  {%- for node in graph.nodes.values() | sort(attribute='unique_id') -%}
    {%- if node.resource_type == 'model' and 'macro.changefeed.publish_feed' in node.depends_on.macros -%}
      {%- set relation = adapter.get_relation(node.database, node.schema, node.alias) -%}
      {%- if relation is not none -%}
        {%- do feeds.append({'unique_id': node.unique_id, 'name': node.name, 'kind': 'published', 'relation': relation}) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- for source in graph.sources.values() | sort(attribute='unique_id') -%}
    {%- if (source.meta or {}).get('changefeed_feed') or ((source.config or {}).get('meta') or {}).get('changefeed_feed') -%}
      {%- set relation = adapter.get_relation(source.database, source.schema, source.identifier) -%}
      {%- if relation is not none -%}
        {%- do feeds.append({'unique_id': source.unique_id, 'name': source.source_name ~ '.' ~ source.name, 'kind': 'landed', 'relation': relation}) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(feeds) }}
{% endmacro %}


{#- [{name, relation, feed}] of the consumers in the graph whose table exists. -#}
{% macro _health_consumers(feeds) %}
  {%- set consumers = [] -%}
  {%- if not execute -%}{{ return(consumers) }}{%- endif -%}
  {%- set readers = ['macro.changefeed.feed_safe_point', 'macro.changefeed.feed_cursor', 'macro.changefeed.feed_events'] -%}
  {%- for node in graph.nodes.values() | sort(attribute='unique_id') -%}
    {%- if node.resource_type == 'model' and (node.depends_on.macros | select('in', readers) | list | length > 0) -%}
      {%- set read = feeds | selectattr('unique_id', 'in', node.depends_on.nodes) | list -%}
      {%- if read | length > 1 -%}
        {%- do exceptions.warn("changefeed health: consumer " ~ node.name ~ " depends on several feeds ("
            ~ read | map(attribute='name') | join(', ') ~ "); it is left out") -%}
      {%- elif read | length == 1 -%}
        {%- set relation = adapter.get_relation(node.database, node.schema, node.alias) -%}
        {%- if relation is not none -%}
          {%- do consumers.append({'name': node.name, 'relation': relation, 'feed': read[0]}) -%}
        {%- endif -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(consumers) }}
{% endmacro %}


{% macro _health_feed_sql() %}
  {%- do changefeed._health_check_adapter('changefeed_feed_health') -%}
  {%- set feeds = changefeed._health_feeds() -%}
  {%- if feeds | length == 0 %}
select
    cast(null as string) as feed, cast(null as string) as feed_relation, cast(null as string) as feed_kind,
    cast(null as int) as shard_id,
    cast(null as binary) as head, cast(null as string) as head_ulid, cast(null as timestamp) as head_at,
    cast(null as binary) as safe_point, cast(null as string) as safe_point_ulid, cast(null as timestamp) as safe_point_at,
    cast(null as bigint) as events, cast(null as bigint) as batches, cast(null as bigint) as last_batch
where false
  {%- endif -%}
  {%- for feed in feeds %}
{% if not loop.first %}union all
{% endif -%}
select
    '{{ feed.name }}' as feed,
    '{{ feed.relation }}' as feed_relation,
    '{{ feed.kind }}' as feed_kind,
    shard_id,
    head,
    {{ changefeed.ulid_to_string('head') }} as head_ulid,
    {{ changefeed.ulid_timestamp('head') }} as head_at,
    head as safe_point,
    {{ changefeed.ulid_to_string('head') }} as safe_point_ulid,
    {{ changefeed.ulid_timestamp('head') }} as safe_point_at,
    events,
    batches,
    last_batch
from (
    select shard_id, max(ulid) as head, count(*) as events,
        count(distinct changefeed_batch) as batches, max(changefeed_batch) as last_batch
    from {{ feed.relation }}
    group by shard_id
) as changefeed_heads
  {%- endfor %}
{% endmacro %}


{% macro _health_consumer_sql() %}
  {%- do changefeed._health_check_adapter('changefeed_consumer_health') -%}
  {%- set consumers = changefeed._health_consumers(changefeed._health_feeds()) -%}
  {%- set zero = "X'" ~ '0' * 32 ~ "'" -%}
  {%- if consumers | length == 0 %}
select
    cast(null as string) as consumer, cast(null as string) as consumer_relation, cast(null as string) as feed,
    cast(null as int) as shard_id,
    cast(null as binary) as cursor, cast(null as string) as cursor_ulid, cast(null as timestamp) as cursor_at,
    cast(null as binary) as safe_point, cast(null as string) as safe_point_ulid, cast(null as timestamp) as safe_point_at,
    cast(null as bigint) as lag_events, cast(null as bigint) as lag_ms
where false
  {%- endif -%}
  {%- for consumer in consumers %}
{% if not loop.first %}union all
{% endif -%}
select
    '{{ consumer.name }}' as consumer,
    '{{ consumer.relation }}' as consumer_relation,
    '{{ consumer.feed.name }}' as feed,
    heads.shard_id,
    cursors.cursor,
    {{ changefeed.ulid_to_string('cursors.cursor') }} as cursor_ulid,
    {{ changefeed.ulid_timestamp('cursors.cursor') }} as cursor_at,
    heads.safe_point,
    {{ changefeed.ulid_to_string('heads.safe_point') }} as safe_point_ulid,
    {{ changefeed.ulid_timestamp('heads.safe_point') }} as safe_point_at,
    coalesce(unread.events, 0) as lag_events,
    case when coalesce(unread.events, 0) = 0 then cast(0 as bigint)
         else unix_millis({{ changefeed.ulid_timestamp('heads.safe_point') }})
              - unix_millis({{ changefeed.ulid_timestamp('coalesce(cursors.cursor, unread.oldest)') }})
    end as lag_ms
from (
    select shard_id, max(ulid) as safe_point from {{ consumer.feed.relation }} group by shard_id
) as heads
left join (
    select shard_id, max(ulid) as cursor from {{ consumer.relation }} group by shard_id
) as cursors on cursors.shard_id = heads.shard_id
left join (
    select e.shard_id, count(*) as events, min(e.ulid) as oldest
    from {{ consumer.feed.relation }} as e
    left join (
        select shard_id, max(ulid) as cursor from {{ consumer.relation }} group by shard_id
    ) as c on c.shard_id = e.shard_id
    where e.ulid > coalesce(c.cursor, {{ zero }})
    group by e.shard_id
) as unread on unread.shard_id = heads.shard_id
  {%- endfor %}
{% endmacro %}
