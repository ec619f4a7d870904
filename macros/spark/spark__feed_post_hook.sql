{#-
  feed_post_hook() on Spark (the dispatcher is macros/feed_post_hook.sql). A Spark model
  has no feed objects to set up: it publishes its feed itself, by wrapping its select in
  {% call changefeed.publish_feed() %} (docs/spark.md). So with the hook configured
  project-wide, this only checks that a model with a changefeed config does that.
-#}
{% macro spark__feed_post_hook() %}
  {%- if not execute or changefeed._feed_model_config() is none -%}
    {{ return('') }}
  {%- endif -%}
  {%- if 'macro.changefeed.publish_feed' not in model.depends_on.macros -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' has a changefeed config, but on Spark a model"
        ~ " publishes its feed by wrapping its select in {% call changefeed.publish_feed() %}"
        ~ " ... {% endcall %} (docs/spark.md)") }}
  {%- endif -%}
  {{ return('') }}
{% endmacro %}
