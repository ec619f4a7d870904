{#- A feed's key as one comparable, readable string: `"order_id" bigint, "sku" text collate "C"`. -#}
{% macro _postgres_key_signature(keys) %}
  {%- set parts = [] -%}
  {%- for key in keys or [] -%}
    {%- do parts.append(changefeed._postgres_ident(key['name']) ~ ' ' ~ key['data_type']
        ~ (' collate ' ~ key['collation'] if key.get('collation') else '')) -%}
  {%- endfor -%}
  {{ return(parts | join(', ')) }}
{% endmacro %}
