{#-
  Everything the SQL generators need about one feed, quoted once: qualified object names
  (q), raw names (n), literals, key column lists and the protocol constants. Pure: no
  queries. Fails clearly for key columns whose names the feed tables already use.
-#}
{% macro _postgres_feed_context(spec) %}
  {%- set reserved = ['shard_id', 'ulid', 'order_sequence', 'txid', 'time_hint'] -%}
  {%- set names = changefeed._postgres_feed_names(spec, spec['mode']) -%}
  {%- set schema = changefeed._postgres_ident(spec['schema']) -%}
  {%- set q = {} -%}
  {%- for kind, name in names.items() -%}
    {%- do q.update({kind: schema ~ '.' ~ changefeed._postgres_ident(name)}) -%}
  {%- endfor -%}
  {%- set key_defs = [] -%}
  {%- set key_list = [] -%}
  {%- set key_list_o = [] -%}
  {%- for key in spec['keys'] or [] -%}
    {%- if key['name'] in reserved -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ key['name'] ~ "' of " ~ spec['feed_id']
          ~ " has the name of a column of the feed's own tables (" ~ reserved | join(', ')
          ~ "); choose a key without it (key: [...]) or rename the column") }}
    {%- endif -%}
    {%- set ident = changefeed._postgres_ident(key['name']) -%}
    {%- do key_defs.append(ident ~ ' ' ~ key['data_type']
        ~ (' collate ' ~ key['collation'] if key.get('collation') else '') ~ ' not null') -%}
    {%- do key_list.append(ident) -%}
    {%- do key_list_o.append('o.' ~ ident) -%}
  {%- endfor -%}
  {%- set source = changefeed._postgres_ident(spec['source_schema']) ~ '.' ~ changefeed._postgres_ident(spec['source_table']) -%}
  {%- set bits = spec.get('block_bits', 36) -%}
  {%- set block = 2 ** bits -%}
  {{ return({
      'spec': spec,
      'mode': spec['mode'],
      'feed_id': spec['feed_id'],
      'schema': schema,
      'n': names,
      'q': q,
      'lit_feed': changefeed._postgres_literal(spec['feed_id']),
      'lit_guc': changefeed._postgres_literal(names['guc']),
      'lit_lock_prefix': changefeed._postgres_literal('changefeed/' ~ spec['feed_id'] ~ '/'),
      'lit_mover_prefix': changefeed._postgres_literal('changefeed/' ~ spec['feed_id'] ~ '/mover/'),
      'lit_sequence': changefeed._postgres_literal(q['sequence']),
      'capture': spec.get('capture') or 'none',
      'shard': spec.get('shard'),
      'capture_names': changefeed._postgres_capture_names(spec),
      'q_source': source,
      'lit_source': changefeed._postgres_literal(source),
      'key_defs': key_defs | join(',\n  '),
      'key_list': key_list | join(', '),
      'key_list_o': key_list_o | join(', '),
      'block_bits': bits,
      'block': block,
      'block_mask': -(2 ** 62) - block,
      'max_low_start': 9223372036854775807 - block,
      'max_ms': 2 ** 48 - 1,
      'stall_timeout_ms': spec.get('stall_timeout_ms', 5000),
      'lock_probe_ms': spec.get('lock_probe_ms', 20),
  }) }}
{% endmacro %}
