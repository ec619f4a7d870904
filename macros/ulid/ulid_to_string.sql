{#- ulid_to_string(column): a 16-byte ULID (binary / bytea / binary(16)) as its canonical
    26-character Crockford base32 string (upper case).

    NULL in gives NULL; a value that is not exactly 16 bytes gives NULL. Pure SQL (no
    UDF), so it runs on Spark Thrift servers and SQL warehouses too; the Python UDF
    changefeed.spark.udfs.ulid_to_string returns the same strings.

    Example: select {{ changefeed.ulid_to_string('e.event_id') }} as event_id from events e
-#}
{% macro ulid_to_string(column) -%}
    {{- changefeed._ulid_check_expression('ulid_to_string', 'column', column) -}}
    {{- return(adapter.dispatch('ulid_to_string', 'changefeed')(column)) -}}
{%- endmacro %}


{% macro default__ulid_to_string(column) -%}
    {{ changefeed._unsupported_adapter('ulid_to_string', 'ulid') }}
{%- endmacro %}


{#- 130 bits of base32 = 10 characters for the 48-bit timestamp + 2 x 8 characters for
    2 x 40 random bits; conv() handles each part inside a 64-bit integer. -#}
{% macro spark__ulid_to_string(column) -%}
case when length({{ column }}) = 16 then translate(concat(
    lpad(conv(hex(substring({{ column }}, 1, 6)), 16, 32), 10, '0'),
    lpad(conv(hex(substring({{ column }}, 7, 5)), 16, 32), 8, '0'),
    lpad(conv(hex(substring({{ column }}, 12, 5)), 16, 32), 8, '0')
), '{{ changefeed._ulid_conv_letters() }}', '{{ changefeed._ulid_crockford_letters() }}') end
{%- endmacro %}


{#- 26 characters from three big-endian parts of 48, 40 and 40 bits, each read as a bigint
    through a bit string. Inline rather than a string_agg() subquery: 3x faster on
    PostgreSQL 16, and it stays usable in generated columns and index expressions. -#}
{% macro postgres__ulid_to_string(column) -%}
case when length({{ column }}) = 16 then
    {%- for start, length, chars in [(1, 6, 10), (7, 5, 8), (12, 5, 8)] %}
    {%- set outer_loop = loop %}
    {%- for k in range(chars) %}
    substr('{{ changefeed._ulid_alphabet() }}', ((('x' || encode(substring({{ column }} from {{ start }} for {{ length }}), 'hex'))::bit({{ 8 * length }})::bigint >> {{ 5 * (chars - 1 - k) }}) & 31)::int + 1, 1)
    {%- if not (outer_loop.last and loop.last) %} ||{% endif %}
    {%- endfor %}
    {%- endfor %}
end
{%- endmacro %}


{#- 26 characters from three big-endian parts of 48, 40 and 40 bits, each read as a bigint
    (binary to bigint is big-endian and zero-padded). Divisors are cast to bigint because
    T-SQL types integer literals above 2^31 as numeric. No subquery, so the expression
    also works inside aggregates, GROUP BY and computed columns. -#}
{% macro sqlserver__ulid_to_string(column) -%}
CASE WHEN DATALENGTH({{ column }}) = 16 THEN CONCAT(
    {%- for start, length, chars in [(1, 6, 10), (7, 5, 8), (12, 5, 8)] %}
    {%- set outer_loop = loop %}
    {%- for k in range(chars) %}
    SUBSTRING('{{ changefeed._ulid_alphabet() }}', CAST(CAST(SUBSTRING({{ column }}, {{ start }}, {{ length }}) AS bigint) / CAST({{ 32 ** (chars - 1 - k) }} AS bigint) % 32 AS int) + 1, 1)
    {%- if not (outer_loop.last and loop.last) %},{% endif %}
    {%- endfor %}
    {%- endfor %}
) END
{%- endmacro %}
