{#- setup and upgrade need a mode and key columns; teardown needs neither. -#}
{% macro _sqlserver_require_mode(spec) %}
  {%- if spec.get('mode') not in ['blocking', 'outbox'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " needs mode: blocking or mode: outbox; got: "
        ~ spec.get('mode')) }}
  {%- endif -%}
  {%- if not spec.get('keys') -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec.get('feed_id') ~ " has no key columns; set key: [column, ...]") }}
  {%- endif -%}
  {{ return(spec) }}
{% endmacro %}
