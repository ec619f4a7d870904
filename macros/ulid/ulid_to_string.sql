{#- ulid_to_string(column): a 16-byte ULID (binary / bytea / binary(16)) as its canonical
    26-character Crockford base32 string (upper case).

    NULL in gives NULL; a value that is not exactly 16 bytes gives NULL. Pure SQL (no
    UDF), so it runs on Spark Thrift servers and SQL warehouses too; the Python UDF
    changefeed.spark.ulid_to_string returns the same strings.

    Example: select {{ changefeed.ulid_to_string('e.event_id') }} as event_id from events e
-#}
{% macro ulid_to_string(column) -%}
    {{- changefeed._ulid_check_expression('ulid_to_string', 'column', column) -}}
    {{- return(adapter.dispatch('ulid_to_string', 'changefeed')(column)) -}}
{%- endmacro %}


{% macro default__ulid_to_string(column) -%}
    {{ changefeed._ulid_unsupported('ulid_to_string') }}
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


{#- Two zero bits + the 128 ULID bits = 26 groups of 5 bits, each an alphabet index. -#}
{% macro postgres__ulid_to_string(column) -%}
case when length({{ column }}) = 16 then (
    select string_agg(
        substr('{{ changefeed._ulid_alphabet() }}', substring(_ulid_bits from 5 * _ulid_i + 1 for 5)::bit(5)::int + 1, 1),
        '' order by _ulid_i)
    from (select B'00' || ('x' || encode({{ column }}, 'hex'))::bit(128) as _ulid_bits) as _ulid_b,
        generate_series(0, 25) as _ulid_i
) end
{%- endmacro %}


{#- Three bigints (48 + 40 + 40 bits); binary to bigint is big-endian and zero-padded.
    Divisors are cast to bigint because T-SQL types literals above 2^31 as numeric. -#}
{% macro sqlserver__ulid_to_string(column) -%}
CASE WHEN DATALENGTH({{ column }}) = 16 THEN (
    SELECT CONCAT(
        {%- for part, chars in [('_ulid_t', 10), ('_ulid_r1', 8), ('_ulid_r2', 8)] %}
        {%- set outer_loop = loop %}
        {%- for k in range(chars) %}
        SUBSTRING('{{ changefeed._ulid_alphabet() }}', CAST({{ part }} / CAST({{ 32 ** (chars - 1 - k) }} AS bigint) % 32 AS int) + 1, 1)
        {%- if not (outer_loop.last and loop.last) %},{% endif %}
        {%- endfor %}
        {%- endfor %}
    )
    FROM (SELECT
        CAST(SUBSTRING({{ column }}, 1, 6) AS bigint) AS _ulid_t,
        CAST(SUBSTRING({{ column }}, 7, 5) AS bigint) AS _ulid_r1,
        CAST(SUBSTRING({{ column }}, 12, 5) AS bigint) AS _ulid_r2
    ) AS _ulid_parts
) END
{%- endmacro %}
