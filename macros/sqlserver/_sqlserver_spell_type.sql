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
