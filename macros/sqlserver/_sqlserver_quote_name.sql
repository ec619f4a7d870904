{#-
  Quotes one SQL Server identifier with brackets, doubling any `]` inside it, like
  quotename() but without its NULL past 128 characters: a name longer than a sysname
  (128 UTF-16 code units) or an empty name fails with a clear error instead.
  Deliberately adapter-neutral (no adapter.quote), so the T-SQL generators render under
  any target.
-#}
{% macro _sqlserver_quote_name(name) %}
  {%- if name is not string or name | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: a SQL Server identifier must be a non-empty string; got: " ~ name) }}
  {%- endif -%}
  {%- if '\x00' in name -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: a SQL Server identifier cannot contain a NUL character: " ~ name) }}
  {%- endif -%}
  {%- set units = (name.encode('utf-16-le') | length) // 2 -%}
  {%- if units > 128 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the SQL Server identifier '" ~ name ~ "' is " ~ units
        ~ " characters (UTF-16 code units) long; the limit is 128") }}
  {%- endif -%}
  {{ return('[' ~ name | replace(']', ']]') ~ ']') }}
{% endmacro %}
