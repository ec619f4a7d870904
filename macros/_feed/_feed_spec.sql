{#-
  The feed spec: the single, adapter-neutral description of one feed from which every
  adapter generates its SQL (config -> spec -> generated SQL -> engine).
  `keys` comes from the adapter's catalogue lookup, so types and collations are the source's.
-#}
{% macro _feed_spec(relation, options, keys) %}
  {%- if keys is none or keys | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed of " ~ relation ~ " has no key columns; set key: [column, ...]") }}
  {%- endif -%}
  {%- set spec = changefeed._feed_identity(relation) -%}
  {%- do changefeed._feed_check_block_bits(spec['block_bits']) -%}
  {%- do spec.update({
      'mode': options['mode'],
      'keys': keys,
      'stall_timeout_ms': options['stall_timeout_ms'],
      'lock_probe_ms': options['lock_probe_ms'],
      'capture': options['capture'],
      'shard': options['shard'],
  }) -%}
  {{ return(spec) }}
{% endmacro %}


{#- What names a feed and its objects, without mode or keys (all that teardown needs). -#}
{% macro _feed_identity(relation) %}
  {{ return({
      'feed_id': relation.schema ~ '.' ~ relation.identifier,
      'database': relation.database,
      'source_schema': relation.schema,
      'source_table': relation.identifier,
      'source_relation': relation.render(),
      'schema': var('changefeed_schema', 'changefeed'),
      'mode': none,
      'keys': none,
      'block_bits': 36,
      'protocol_version': changefeed._feed_protocol_version(),
  }) }}
{% endmacro %}


{#- BLOCK = 2^block_bits (protocol section 3): a block must hold more than a few ULIDs and
    leave bit 62 and the sign bit of ulid_low free. -#}
{% macro _feed_check_block_bits(bits) %}
  {%- if bits is not integer or bits is sameas true or bits is sameas false or bits < 8 or bits > 60 -%}
    {{ exceptions.raise_compiler_error("changefeed: block_bits must be a whole number in [8, 60]; got: " ~ bits) }}
  {%- endif -%}
{% endmacro %}


{#- Bumped whenever generated procedures change in a way that needs `upgrade_feed`. -#}
{% macro _feed_protocol_version() %}
  {{ return(2) }}
{% endmacro %}
