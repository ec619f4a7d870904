{#- Dollar-quotes a routine body with a tag that does not occur in it (an identifier such
    as a"$cf$"b inside the body must not end the quote early). -#}
{% macro _postgres_dollar_quote(body, tag='cf') %}
  {%- set state = namespace(tag='$' ~ tag ~ '$') -%}
  {%- for i in range(1000) -%}
    {%- if state.tag in body -%}
      {%- set state.tag = '$' ~ tag ~ i ~ '$' -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if state.tag in body -%}
    {{ exceptions.raise_compiler_error("changefeed: cannot dollar-quote a routine body") }}
  {%- endif -%}
  {{ return(state.tag ~ '\n' ~ body ~ '\n' ~ state.tag) }}
{% endmacro %}
