{#-
  Sets up the feed of the model being built, from its `changefeed` config. Put it once in
  dbt_project.yml and it does nothing for models without that config:

    models:
      +post-hook: "{{ changefeed.feed_post_hook() }}"

  It runs the setup itself (inside the model's transaction where the adapter has one)
  and renders no SQL of its own. Only incremental models with mode: outbox and
  capture: trigger may have a feed (_feed_model_rules in macros/_feed/spec.sql explains
  why); anything else fails the run, which rolls the model back.
-#}
{% macro feed_post_hook() %}
  {{ return(adapter.dispatch('feed_post_hook', 'changefeed')()) }}
{% endmacro %}

{% macro default__feed_post_hook() %}
  {%- set raw = changefeed._feed_model_config() -%}
  {%- if raw is none or not execute -%}
    {{ return('') }}
  {%- endif -%}
  {#- The same implementation as setup_feed, given the raw config (validated there, once)
      and the model, whose materialization decides whether a feed on it is safe. -#}
  {%- do adapter.dispatch('setup_feed', 'changefeed')(this, raw, changefeed._feed_model_context()) -%}
  {{ return('') }}
{% endmacro %}
