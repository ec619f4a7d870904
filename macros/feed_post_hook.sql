{#-
  Sets up the feed of the model being built, from its `changefeed` config. Put it once in
  dbt_project.yml and it does nothing for models without that config:

    models:
      +post-hook: "{{ changefeed.feed_post_hook() }}"

  It runs the setup itself (inside the model's transaction where the adapter has one)
  and renders no SQL of its own.
-#}
{% macro feed_post_hook() %}
  {{ return(adapter.dispatch('feed_post_hook', 'changefeed')()) }}
{% endmacro %}

{% macro default__feed_post_hook() %}
  {%- set raw = changefeed._feed_model_config() -%}
  {%- if raw is none or not execute -%}
    {{ return('') }}
  {%- endif -%}
  {%- set options = changefeed._feed_options(raw) -%}
  {%- do changefeed.setup_feed(
      this, options['mode'], options['key'], options['stall_timeout_ms'], options['lock_probe_ms'],
      options['capture'], options['shard']) -%}
  {{ return('') }}
{% endmacro %}
