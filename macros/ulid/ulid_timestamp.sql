{#- ulid_timestamp(column): the creation time in a 16-byte ULID, to the millisecond
    (Spark TIMESTAMP, PostgreSQL timestamptz, SQL Server datetime2(3) in UTC).

    NULL in gives NULL; a value that is not exactly 16 bytes gives NULL. SQL Server's
    datetime2 ends at 9999-12-31, so there a ULID timestamp after that (possible: 48 bits
    of milliseconds reach the year 10889) also gives NULL. Pure SQL; the UDF
    changefeed.spark.udfs.ulid_timestamp returns the same instants.

    Example: select {{ changefeed.ulid_timestamp('e.event_id') }} as created_at from events e
-#}
{% macro ulid_timestamp(column) -%}
    {{- changefeed._ulid_check_expression('ulid_timestamp', 'column', column) -}}
    {{- return(adapter.dispatch('ulid_timestamp', 'changefeed')(column)) -}}
{%- endmacro %}


{% macro default__ulid_timestamp(column) -%}
    {{ changefeed._unsupported_adapter('ulid_timestamp', 'ulid') }}
{%- endmacro %}


{% macro spark__ulid_timestamp(column) -%}
case when length({{ column }}) = 16 then timestamp_millis(cast(conv(hex(substring({{ column }}, 1, 6)), 16, 10) as bigint)) end
{%- endmacro %}


{#- Whole seconds plus milliseconds keeps every step exact: to_timestamp() takes a
    double, which holds any whole number of seconds here but not every fraction. -#}
{% macro postgres__ulid_timestamp(column) -%}
{%- set ms = "('x' || encode(substring(" ~ column ~ " from 1 for 6), 'hex'))::bit(48)::bigint" -%}
case when length({{ column }}) = 16 then
    to_timestamp({{ ms }} / 1000) + ({{ ms }} % 1000) * interval '1 millisecond'
end
{%- endmacro %}


{#- DATEADD takes an int, so add whole days first and then the milliseconds left.
    datetime2 ends with 9999-12-31 23:59:59.999 = 253402300799999 ms. -#}
{% macro sqlserver__ulid_timestamp(column) -%}
{%- set ms = "CAST(SUBSTRING(" ~ column ~ ", 1, 6) AS bigint)" -%}
CASE WHEN DATALENGTH({{ column }}) = 16 AND {{ ms }} <= CAST(253402300799999 AS bigint) THEN
    DATEADD(millisecond, CAST({{ ms }} % 86400000 AS int),
        DATEADD(day, CAST({{ ms }} / 86400000 AS int), CAST('1970-01-01' AS datetime2(3))))
END
{%- endmacro %}
