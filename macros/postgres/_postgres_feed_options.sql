{#- The options a feed's generated code depends on, as stored in the registry. -#}
{% macro _postgres_feed_options(spec) %}
  {{ return({
      'stall_timeout_ms': spec['stall_timeout_ms'],
      'lock_probe_ms': spec['lock_probe_ms'],
      'block_bits': spec.get('block_bits', 36),
  }) }}
{% endmacro %}
