{#- SQL expression: a timestamptz as whole Unix milliseconds (exact: extract returns numeric). -#}
{% macro _postgres_sql_epoch_ms(ts) %}
(pg_catalog.floor(extract(epoch from {{ ts }}) * 1000)::bigint)
{%- endmacro %}
