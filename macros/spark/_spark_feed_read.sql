{#-
  Reading a Spark feed (docs/protocol.md 11.3 and 11.6): the safe point of each shard is
  its head, max(ulid) over the committed rows. It is read here, in a statement of its
  own that runs before the model's statement lists the feed's partitions, and rendered
  into the model's SQL as literals.
-#}

{#- [(shard_id, 'HEX' of the head)], in shard order; [] for an empty feed. -#}
{% macro _spark_feed_heads(feed) %}
  {%- do run_query('refresh table ' ~ feed) -%}
  {%- set rows = run_query(
      'select shard_id, hex(max(ulid)) as head from ' ~ feed
      ~ ' where shard_id is not null group by shard_id order by shard_id') -%}
  {%- set heads = [] -%}
  {%- for row in rows.rows -%}
    {%- do heads.append((row[0] | int, row[1] | string)) -%}
  {%- endfor -%}
  {{ return(heads) }}
{% endmacro %}


{#- `<alias>.ulid <= <the shard's safe point>`; false for a shard (or feed) without one. -#}
{% macro _spark_safe_point_predicate(heads, alias) %}
  {%- if heads | length == 0 -%}
    {{ return('false') }}
  {%- endif -%}
  {%- set sql -%}
({{ alias }}.ulid <= case {{ alias }}.shard_id
{%- for shard, head in heads %}
    when {{ shard }} then X'{{ head }}'
{%- endfor %}
end)
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- `<alias>.ulid > <the consumer's cursor for the row's shard>`, the cursor being the
    highest ULID of that shard in the consumer's committed output (16 zero bytes if none). -#}
{% macro _spark_cursor_predicate(alias, output) %}
  {%- set sql -%}
({{ alias }}.ulid > coalesce((
    select max(changefeed_cursor.ulid) from {{ output }} as changefeed_cursor
    where changefeed_cursor.shard_id = {{ alias }}.shard_id
), X'{{ '0' * 32 }}'))
  {%- endset -%}
  {{ return(sql) }}
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


{% macro _spark_unsupported(macro_name) %}
  {{ exceptions.raise_compiler_error(
      "changefeed." ~ macro_name ~ " does not support the '" ~ adapter.type() ~ "' adapter;"
      ~ " supported adapters: spark (and databricks). PostgreSQL and SQL Server consumers read"
      ~ " with read_feed:<feed> (docs/protocol.md section 8)") }}
{% endmacro %}
