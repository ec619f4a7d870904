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


{#-
  A T-SQL Unicode string literal: N'...' with every `'` doubled. Every value that is
  pasted into generated T-SQL as a string (object names for object_id(), lock names,
  messages, the bodies run by sp_executesql) goes through here.
-#}
{% macro _sqlserver_literal(value) %}
  {%- if value is none -%}
    {{ exceptions.raise_compiler_error("changefeed: cannot write NULL as a T-SQL string literal") }}
  {%- endif -%}
  {{ return("N'" ~ (value | string) | replace("'", "''") ~ "'") }}
{% endmacro %}


{#-
  A column's T-SQL type from sys.columns/sys.types, as it must be written in a column
  declaration: varchar(40), nvarchar(max), decimal(18, 4), datetime2(3), ...
  Types whose values cannot simply be copied into another table are mapped to one that
  keeps them: rowversion (timestamp) -> binary(8); the deprecated text, ntext, image ->
  varchar(max), nvarchar(max), varbinary(max).
-#}
{% macro _sqlserver_spell_type(type_name, max_length, precision, scale) %}
  {%- set name = type_name | lower -%}
  {%- if name in ['timestamp', 'rowversion'] -%}
    {{ return('binary(8)') }}
  {%- elif name == 'text' -%}
    {{ return('varchar(max)') }}
  {%- elif name == 'ntext' -%}
    {{ return('nvarchar(max)') }}
  {%- elif name == 'image' -%}
    {{ return('varbinary(max)') }}
  {%- elif name in ['varchar', 'char', 'varbinary', 'binary'] -%}
    {{ return(name ~ '(' ~ ('max' if max_length | int == -1 else max_length | int) ~ ')') }}
  {%- elif name in ['nvarchar', 'nchar'] -%}
    {{ return(name ~ '(' ~ ('max' if max_length | int == -1 else (max_length | int) // 2) ~ ')') }}
  {%- elif name in ['decimal', 'numeric'] -%}
    {{ return(name ~ '(' ~ precision | int ~ ', ' ~ scale | int ~ ')') }}
  {%- elif name in ['datetime2', 'time', 'datetimeoffset'] -%}
    {{ return(name ~ '(' ~ scale | int ~ ')') }}
  {%- else -%}
    {{ return(name) }}
  {%- endif -%}
{% endmacro %}
