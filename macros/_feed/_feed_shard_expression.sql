{#-
  Checks the shard expression of capture: trigger (a SQL expression over the source row's
  columns, e.g. `customer_id % 8`) and returns it trimmed. The expression is pasted into
  generated code that runs with the feed owner's rights, so it must stay one expression:
  no statement separator, no comment and no dollar quote or backslash escape anywhere
  (not even in a string), and parentheses that balance outside quoted text. Whether it
  names real columns and gives an integer is checked by the engine at setup, on the
  source table itself, before anything is created.
-#}
{% macro _feed_shard_expression(expression) %}
  {%- if expression is number and expression is not sameas true and expression is not sameas false -%}
    {%- set expression = expression | string -%}
  {%- endif -%}
  {%- if expression is not string or expression | trim | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: shard must be a SQL expression over the source row's columns, such as"
        ~ " \"customer_id % 8\" or 0; got: " ~ expression) }}
  {%- endif -%}
  {%- set expression = expression | trim -%}
  {%- for forbidden in [';', '--', '/*', '*/', '$', '\\'] -%}
    {%- if forbidden in expression -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: the shard expression may not contain " ~ forbidden ~ " (it must stay one"
          ~ " expression; forbidden anywhere: ; -- /* */ $ \\); got: " ~ expression) }}
    {%- endif -%}
  {%- endfor -%}
  {#- Parentheses outside '...', "..." and [...] must balance and never close more than
      they opened, so the expression cannot end the parenthesis it is wrapped in. -#}
  {%- set state = namespace(depth=0, quote=none, bad=false) -%}
  {%- for character in expression -%}
    {%- if state.quote is not none -%}
      {%- if character == state.quote -%}{%- set state.quote = none -%}{%- endif -%}
    {%- elif character == "'" or character == '"' -%}
      {%- set state.quote = character -%}
    {%- elif character == '[' -%}
      {%- set state.quote = ']' -%}
    {%- elif character == '(' -%}
      {%- set state.depth = state.depth + 1 -%}
    {%- elif character == ')' -%}
      {%- set state.depth = state.depth - 1 -%}
      {%- if state.depth < 0 -%}{%- set state.bad = true -%}{%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if state.bad or state.depth != 0 or state.quote is not none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the shard expression has unbalanced parentheses or an unclosed quote: " ~ expression) }}
  {%- endif -%}
  {{ return(expression) }}
{% endmacro %}
