{#-
  The SQL of one publishing run (docs/protocol.md 11.4): the model's rows, each given
  its shard, a ULID from one fresh block per shard, and the run's batch number.

  input_sql       the model's select
  columns         its column names (in order)
  key             key column names: the rows' order inside the run
  shard           SQL expression over the input columns giving the shard (int)
  time_hint       SQL expression: the run's time in epoch milliseconds
  feed_id         the feed table's name without its schema: seeds the block's random bytes,
                  so the same model publishes the same ULIDs in a dev and a prod schema
  head_relation   the feed (`this`) on an incremental run, none on a first run

  Constants: 2^36 = 68719476736 (block), 2^26 = 67108864, 2^27 = 134217728,
  2^63 - 2^37 = 9223371899415822336, -2^37 = -137438953472.
-#}
{% macro _spark_publish_sql(input_sql, columns, key, shard, time_hint, feed_id, head_relation) %}
with changefeed_input as (
{{ input_sql }}
),

-- 1. number each shard's rows of this run from 0, in key order, then by the row's JSON
changefeed_rows as (
    select
        cast({{ shard }} as int) as changefeed_shard,
        row_number() over (
            partition by cast({{ shard }} as int)
            order by {% for column in key %}changefeed_input.{{ adapter.quote(column) }}, {% endfor %}to_json(struct(changefeed_input.*))
        ) - 1 as changefeed_offset,
        changefeed_input.*
    from changefeed_input
),

-- 2. the committed state of each shard is the feed itself: its head (protocol 11.4)
changefeed_heads as (
{%- if head_relation is not none %}
    select shard_id, max(ulid) as head from {{ head_relation }} group by shard_id
{%- else %}
    select cast(null as int) as shard_id, cast(null as binary) as head where false
{%- endif %}
),

changefeed_state as (
    select
        shards.changefeed_shard as shard_id,
        heads.head,
        cast(conv(hex(substring(heads.head, 1, 6)), 16, 10) as bigint) as head_ms,
        shiftleft(shiftright(cast(conv(hex(substring(heads.head, 9, 8)), 16, -10) as bigint), 36), 36) as last_block_start,
        cast({{ time_hint }} as bigint) as hint,
        {{ changefeed._spark_next_batch_sql(head_relation) }} as batch
    from (select distinct changefeed_shard from changefeed_rows) as shards
    left join changefeed_heads as heads on heads.shard_id = shards.changefeed_shard
),

-- 3. protocol 3, steps 1-4: t = max(time hint, head time); the same millisecond continues
--    after the head's block if the next block stays in its sign region, else t + 1 ms
changefeed_clock as (
    select
        *,
        case when hint is not null then greatest(hint, head_ms) end as t,
        case when last_block_start >= 0 then last_block_start <= 9223371899415822336L
             else last_block_start <= -137438953472L end as has_room
    from changefeed_state
),

changefeed_time as (
    select
        *,
        (head is not null and t = head_ms and has_room) as continues,
        case when head is not null and t = head_ms and not has_room then head_ms + 1 else t end as block_ms
    from changefeed_clock
),

changefeed_seeded as (
    select
        *,
        sha2(concat_ws('|', '{{ feed_id }}', cast(shard_id as string), cast(batch as string), cast(block_ms as string)), 256) as seed
    from changefeed_time
),

-- 4. a fresh block: ts48(t) || 2 seed bytes, start = 26 seed bits << 36 with bit 62 clear
changefeed_blocks as (
    select
        shard_id,
        batch,
        block_ms,
        case when continues then substring(head, 1, 8)
             else concat(unhex(lpad(hex(block_ms), 12, '0')), unhex(substring(seed, 1, 4))) end as ulid_high,
        case when continues then last_block_start + 68719476736L
             when cast(conv(substring(seed, 5, 7), 16, 10) as bigint) >= 134217728
                 then -9223372036854775808L + pmod(cast(conv(substring(seed, 5, 7), 16, 10) as bigint), 67108864) * 68719476736L
             else pmod(cast(conv(substring(seed, 5, 7), 16, 10) as bigint), 67108864) * 68719476736L end as block_start
    from changefeed_seeded
)

-- 5. row i of a shard gets ulid_high || int8(block_start + i); a row the rules cannot
--    place fails the run instead of being dropped or getting a wrong ULID
select
    rows.changefeed_shard as shard_id,
    case
        when rows.changefeed_shard is null
            then raise_error('changefeed: publish_feed of {{ feed_id }}: the shard expression gave null for a row')
        when blocks.block_ms is null or blocks.block_ms < 0 or blocks.block_ms >= 281474976710656L
            then raise_error(concat('changefeed: publish_feed of {{ feed_id }}: the time_hint must be epoch milliseconds in [0, 2^48); got ', coalesce(cast(blocks.block_ms as string), 'null')))
        when rows.changefeed_offset >= 68719476736L
            then raise_error('changefeed: publish_feed of {{ feed_id }}: more than 2^36 rows for one shard in one run')
        else concat(blocks.ulid_high, unhex(lpad(hex(blocks.block_start + rows.changefeed_offset), 16, '0')))
    end as ulid,
{%- for column in columns %}
    rows.{{ adapter.quote(column) }},
{%- endfor %}
    coalesce(blocks.batch, {{ changefeed._spark_next_batch_sql(head_relation) }}) as changefeed_batch
from changefeed_rows as rows
left join changefeed_blocks as blocks on blocks.shard_id = rows.changefeed_shard
{% endmacro %}


{#-
  Validates a publishing model's `changefeed` config on Spark and returns it normalised:
  {key: [columns], shard: SQL expression, time_hint: SQL expression}.
-#}
{% macro _spark_publish_options(raw) %}
  {%- set who = "changefeed.publish_feed in model '" ~ model.name ~ "'" -%}
  {%- set accepted = ['key', 'shard', 'time_hint'] -%}
  {%- if raw is none or raw is not mapping -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": the model needs a changefeed config such as changefeed={'key': ['order_id']}; got: " ~ raw) }}
  {%- endif -%}
  {%- for name in raw -%}
    {%- if name == 'mode' -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": 'mode' (blocking/outbox) applies to PostgreSQL and SQL Server feeds; a Spark model"
          ~ " publishes one block per run. Accepted options: " ~ accepted | join(', ')) }}
    {%- elif name not in accepted -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": unknown changefeed option '" ~ name ~ "'; accepted options: " ~ accepted | join(', ')) }}
    {%- endif -%}
  {%- endfor -%}
  {%- set key = raw.get('key') -%}
  {%- if key is string -%}{%- set key = [key] -%}{%- endif -%}
  {%- if key is none or key is mapping or key is not iterable or key | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        who ~ ": changefeed.key must be a column name or a non-empty list of column names; got: " ~ raw.get('key')) }}
  {%- endif -%}
  {%- for column in key -%}
    {%- if column is not string or not modules.re.match('^[A-Za-z_][A-Za-z0-9_]*$', column) -%}
      {{ exceptions.raise_compiler_error(who ~ ": every key column must be a column name; got: " ~ column) }}
    {%- endif -%}
  {%- endfor -%}
  {%- if key | map('lower') | unique | list | length != key | length -%}
    {{ exceptions.raise_compiler_error(who ~ ": changefeed.key lists a column twice: " ~ key | join(', ')) }}
  {%- endif -%}
  {%- for name in ['shard', 'time_hint'] -%}
    {%- set value = raw.get(name) -%}
    {%- if value is not none and not (value is string and value | trim != '') and not (value is integer and value is not sameas true and value is not sameas false) -%}
      {{ exceptions.raise_compiler_error(
          who ~ ": changefeed." ~ name ~ " must be a SQL expression (a string) or a whole number; got: " ~ value) }}
    {%- endif -%}
  {%- endfor -%}
  {{ return({
      'key': key | list,
      'shard': (raw.get('shard') if raw.get('shard') is not none else 0) | string,
      'time_hint': (raw.get('time_hint') | string) if raw.get('time_hint') is not none else 'unix_millis(current_timestamp())',
  }) }}
{% endmacro %}
