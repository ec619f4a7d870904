{#- SQL expression: the first (fill false) or last (fill true) ULID of the block that ULID
    `u` belongs to. Blocks are aligned to 2^bits, so that is u with its low `bits` bits
    cleared or set (bits = 36: bytes 12-15 and the low nibble of byte 11, 0-based). -#}
{% macro _postgres_sql_block_edge(u, bits, fill) %}
  {%- set full_bytes = bits // 8 -%}
  {%- set part_bits = bits % 8 -%}
  {%- set first_cleared = 16 - full_bytes -%}
  {%- set state = namespace(expr=u) -%}
  {%- for i in range(first_cleared, 16) -%}
    {%- set state.expr = 'pg_catalog.set_byte(' ~ state.expr ~ ', ' ~ i ~ ', ' ~ (255 if fill else 0) ~ ')' -%}
  {%- endfor -%}
  {%- if part_bits -%}
    {%- set low_mask = 2 ** part_bits - 1 -%}
    {%- set at = first_cleared - 1 -%}
    {%- if fill -%}
      {%- set state.expr = 'pg_catalog.set_byte(' ~ state.expr ~ ', ' ~ at ~ ', pg_catalog.get_byte(' ~ u ~ ', ' ~ at ~ ') | ' ~ low_mask ~ ')' -%}
    {%- else -%}
      {%- set state.expr = 'pg_catalog.set_byte(' ~ state.expr ~ ', ' ~ at ~ ', pg_catalog.get_byte(' ~ u ~ ', ' ~ at ~ ') & ' ~ (255 - low_mask) ~ ')' -%}
    {%- endif -%}
  {%- endif -%}
  {{ return(state.expr) }}
{% endmacro %}
