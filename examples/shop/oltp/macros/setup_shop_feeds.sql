{#-
  setup_shop_feeds(): sets up (or checks) the feed of every table in the var
  `shop_feeds` (dbt_project.yml) with changefeed.setup_feed. Idempotent: an unchanged
  config does nothing, a changed mode or key fails and names the remedy.

    dbt run-operation setup_shop_feeds

  The same as one `dbt run-operation changefeed.setup_feed --args '{...}'` per feed.
-#}
{% macro setup_shop_feeds() %}
  {%- for feed in var('shop_feeds') -%}
    {%- do changefeed.setup_feed(
        feed['relation'], feed['mode'], feed.get('key'),
        feed.get('stall_timeout_ms'), feed.get('lock_probe_ms')) -%}
  {%- endfor -%}
{% endmacro %}
