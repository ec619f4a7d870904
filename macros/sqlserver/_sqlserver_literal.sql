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
