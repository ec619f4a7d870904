{#- ulid_from_string(column): a 26-character ULID string (either case) as the 16-byte
    ULID (Spark binary, PostgreSQL bytea, SQL Server binary(16)).

    NULL in gives NULL; anything that is not a canonical ULID gives NULL: a length other
    than 26, a character outside Crockford base32 (I, L, O and U are not in it), or a
    first character above '7' (the value would not fit in 128 bits). Pure SQL; the UDF
    changefeed.spark.ulid_from_string returns the same bytes.

    Example: where e.event_id = {{ changefeed.ulid_from_string("'01ARZ3NDEKTSV4RRFFQ69G5FAV'") }}
-#}
{% macro ulid_from_string(column) -%}
    {{- changefeed._ulid_check_expression('ulid_from_string', 'column', column) -}}
    {{- return(adapter.dispatch('ulid_from_string', 'changefeed')(column)) -}}
{%- endmacro %}


{% macro default__ulid_from_string(column) -%}
    {{ changefeed._ulid_unsupported('ulid_from_string') }}
{%- endmacro %}


{#- The regex is checked on the original string with explicit ASCII ranges, not after
    upper(): Java upper-cases some non-ASCII letters to ASCII ones (U+017F to 'S').
    length() = 26 also rules out a trailing newline, which Java's '$' would allow. -#}
{% macro spark__ulid_from_string(column) -%}
case when length({{ column }}) = 26 and {{ column }} rlike '{{ changefeed._ulid_regex() }}' then unhex(concat(
    lpad(conv(substring(translate(upper({{ column }}), '{{ changefeed._ulid_crockford_letters() }}', '{{ changefeed._ulid_conv_letters() }}'), 1, 10), 32, 16), 12, '0'),
    lpad(conv(substring(translate(upper({{ column }}), '{{ changefeed._ulid_crockford_letters() }}', '{{ changefeed._ulid_conv_letters() }}'), 11, 8), 32, 16), 10, '0'),
    lpad(conv(substring(translate(upper({{ column }}), '{{ changefeed._ulid_crockford_letters() }}', '{{ changefeed._ulid_conv_letters() }}'), 19, 8), 32, 16), 10, '0')
)) end
{%- endmacro %}


{#- Each character's alphabet index as 5 bits, 130 bits in all; the first two are the
    zero bits (guaranteed by the regex), the other 128 become 4 x 8 hex digits. -#}
{% macro postgres__ulid_from_string(column) -%}
case when {{ column }} ~ '{{ changefeed._ulid_regex() }}' then (
    select decode(
        lpad(to_hex(substring(_ulid_bits from 1 for 32)::bit(32)::int), 8, '0')
        || lpad(to_hex(substring(_ulid_bits from 33 for 32)::bit(32)::int), 8, '0')
        || lpad(to_hex(substring(_ulid_bits from 65 for 32)::bit(32)::int), 8, '0')
        || lpad(to_hex(substring(_ulid_bits from 97 for 32)::bit(32)::int), 8, '0'),
        'hex')
    from (
        select substring(string_agg(
            (strpos('{{ changefeed._ulid_alphabet() }}', substr(upper({{ column }}), _ulid_i, 1)) - 1)::bit(5)::text,
            '' order by _ulid_i) from 3) as _ulid_bits
        from generate_series(1, 26) as _ulid_i
    ) as _ulid_decoded
) end
{%- endmacro %}


{#- No regex in T-SQL: LIKE with a binary collation (so ranges are code-point ranges and
    case-sensitive) and a '|' sentinel (so trailing spaces and extra characters fail).
    Characters become three bigints (50 + 40 + 40 bits) whose big-endian bytes are cut
    to 6 + 5 + 5 bytes. -#}
{% macro sqlserver__ulid_from_string(column) -%}
CASE WHEN CONCAT({{ column }}, '|') COLLATE Latin1_General_BIN2
    LIKE '[0-7]' + REPLICATE('[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]', 25) + '|' THEN (
    SELECT CAST(
        SUBSTRING(CAST(_ulid_t AS binary(8)), 3, 6)
        + SUBSTRING(CAST(_ulid_r1 AS binary(8)), 4, 5)
        + SUBSTRING(CAST(_ulid_r2 AS binary(8)), 4, 5) AS binary(16))
    FROM (SELECT
        {%- for alias, start, chars in [('_ulid_t', 1, 10), ('_ulid_r1', 11, 8), ('_ulid_r2', 19, 8)] %}
        {%- set outer_loop = loop %}
        {%- for k in range(chars) %}
        (CHARINDEX(SUBSTRING(_ulid_s, {{ start + k }}, 1), '{{ changefeed._ulid_alphabet() }}' COLLATE Latin1_General_BIN2) - 1) * CAST({{ 32 ** (chars - 1 - k) }} AS bigint)
        {%- if not loop.last %} +{% else %} AS {{ alias }}{% if not outer_loop.last %},{% endif %}{% endif %}
        {%- endfor %}
        {%- endfor %}
        FROM (SELECT UPPER({{ column }}) AS _ulid_s) AS _ulid_upper
    ) AS _ulid_parts
) END
{%- endmacro %}
