{#- setup and upgrade need a mode and key columns (and capture: trigger needs outbox);
    teardown needs none of them. -#}
{% macro _sqlserver_require_mode(spec) %}
  {%- if spec.get('mode') not in ['blocking', 'outbox'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " needs mode: blocking or mode: outbox; got: "
        ~ spec.get('mode')) }}
  {%- endif -%}
  {%- if (spec.get('capture') or 'none') not in ['none', 'trigger'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " needs capture: none or capture: trigger; got: "
        ~ spec.get('capture')) }}
  {%- endif -%}
  {%- if spec.get('capture') == 'trigger' and spec.get('mode') != 'outbox' -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " has capture: trigger, which needs mode: outbox; got: "
        ~ spec.get('mode')) }}
  {%- endif -%}
  {%- if not spec.get('keys') -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " has no key columns; set key: [column, ...]") }}
  {%- endif -%}
  {{ return(spec) }}
{% endmacro %}
