{#- The options a feed's generated code depends on, as stored in the registry. -#}
{#- capture and shard are stored only for capture: trigger, so that the options of feeds
    registered before capture existed still compare equal. -#}
{% macro _postgres_feed_options(spec) %}
  {%- set options = {
      'stall_timeout_ms': spec['stall_timeout_ms'],
      'lock_probe_ms': spec['lock_probe_ms'],
      'block_bits': spec.get('block_bits', 36),
  } -%}
  {%- if spec.get('capture') == 'trigger' -%}
    {%- do options.update({'capture': 'trigger', 'shard': spec['shard']}) -%}
  {%- endif -%}
  {{ return(options) }}
{% endmacro %}
