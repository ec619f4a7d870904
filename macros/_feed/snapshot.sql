{#- request_snapshot's arguments (protocol 12.1), adapter-neutral: shard an integer;
    key_from/key_to none, a value (a one-column key) or a list of one value per key
    column, none of them null. Returns [key_from, key_to] as the JSON text snapshot_begin
    takes (none for an unbounded end). -#}
{% macro _feed_snapshot_arguments(shard, key_from, key_to, key_names) %}
  {%- if shard is not integer or shard is sameas true or shard is sameas false
        or shard < -2147483648 or shard > 2147483647 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: request_snapshot's shard must be a 32-bit integer (default 0); got: " ~ shard) }}
  {%- endif -%}
  {%- set bounds = [] -%}
  {%- for name, value in [('key_from', key_from), ('key_to', key_to)] -%}
    {%- set values = value if (value is iterable and value is not string and value is not mapping) else [value] -%}
    {%- set form = "a list of " ~ key_names | length ~ " value(s), one per key column (" ~ key_names | join(', ') ~ ")"
        ~ (", or one value" if key_names | length == 1 else "") -%}
    {%- if value is none -%}
      {%- do bounds.append(none) -%}
    {%- elif value is mapping or values | length != key_names | length
          or (values | select('none') | list | length) > 0
          or (values | select('mapping') | list | length) > 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: request_snapshot's " ~ name ~ " must be " ~ form ~ ", none of them null (or left out); got: " ~ value) }}
    {%- else -%}
      {%- do bounds.append(tojson(values | list)) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(bounds) }}
{% endmacro %}

{#- The line a setup logs when it has created a feed on a table that already has rows:
    a feed holds the changes from its setup on, so those rows are in no event until a
    snapshot adds them (docs/snapshot.md). Each adapter asks its database whether the
    table has a row; the words are the same for both. -#}
{% macro _feed_existing_rows_hint(spec) %}
  {{ return("changefeed: " ~ spec['feed_id'] ~ " already has rows, and they are not in the feed, "
     ~ "which holds the changes from now on; to add them as events, snapshot the table into "
     ~ "the landed feed: changefeed snapshot --connection URI --feed " ~ spec['feed_id']
     ~ " --table LANDED_TABLE, or dbt run-operation changefeed.request_snapshot --args '{relation: "
     ~ spec['feed_id'] ~ "}' before the next landing (docs/snapshot.md)") }}
{% endmacro %}
