{#-
  The name of one of a feed's objects: `kind:schema.table`, shortened deterministically
  when the engine's limit is exceeded (protocol section 9): the longest prefix of
  `schema.table` that fits, then `~` and the first 8 hex digits of md5(schema.table).
  unit is 'bytes' (PostgreSQL counts UTF-8 bytes) or 'utf16' (SQL Server's sysname counts
  UTF-16 code units, so a character outside the BMP, such as an emoji, counts twice).
  The prefix is built character by character, so a character is never split.
-#}
{% macro _feed_object_name(spec, kind, max_length, unit) %}
  {%- if unit not in ['bytes', 'utf16'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: name length unit must be 'bytes' or 'utf16'; got: " ~ unit) }}
  {%- endif -%}
  {%- set full = kind ~ ':' ~ spec['feed_id'] -%}
  {%- if changefeed._feed_name_length(full, unit) <= max_length -%}
    {{ return(full) }}
  {%- endif -%}
  {%- set suffix = '~' ~ local_md5(spec['feed_id'])[:8] -%}
  {%- set budget = max_length - changefeed._feed_name_length(kind ~ ':' ~ suffix, unit) -%}
  {%- if budget < 1 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: object kind '" ~ kind ~ "' is too long for a " ~ max_length ~ "-" ~ unit ~ " name") }}
  {%- endif -%}
  {%- set state = namespace(prefix='', full=false) -%}
  {%- for character in spec['feed_id'] -%}
    {%- if not state.full -%}
      {%- if changefeed._feed_name_length(state.prefix ~ character, unit) <= budget -%}
        {%- set state.prefix = state.prefix ~ character -%}
      {%- else -%}
        {%- set state.full = true -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(kind ~ ':' ~ state.prefix ~ suffix) }}
{% endmacro %}


{% macro _feed_name_length(name, unit) %}
  {%- if unit == 'bytes' -%}
    {{ return(name.encode('utf-8') | length) }}
  {%- endif -%}
  {{ return((name.encode('utf-16-le') | length) // 2) }}
{% endmacro %}
