{#-
  The changefeed config of the model being built: `meta: {changefeed: {...}}`, or the
  top-level `changefeed` key. dbt 1.10+ warns about custom top-level config keys
  (CustomKeyInConfigDeprecation) and may refuse them one day, so `meta` is the form the
  docs recommend; the top-level key keeps working. none when the model has neither.
-#}
{% macro _feed_model_config() %}
  {%- set top = config.get('changefeed') -%}
  {%- set meta = config.get('meta') -%}
  {%- set nested = meta.get('changefeed') if meta is mapping else none -%}
  {%- if top is not none and nested is not none and top != nested -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' sets a changefeed config both under meta ("
        ~ nested ~ ") and as a top-level config key (" ~ top ~ "), and they differ; keep one,"
        ~ " preferably meta: {changefeed: ...}") }}
  {%- endif -%}
  {{ return(nested if nested is not none else top) }}
{% endmacro %}
