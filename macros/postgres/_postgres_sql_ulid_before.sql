{#- SQL expression: the ULID immediately below high || int8(low), as bytes (an unsigned
    decrement of the 16 bytes, so low = 0 borrows from high and low = -2^63 wraps to 2^63-1). -#}
{% macro _postgres_sql_ulid_before(high, low) %}
(case when {{ low }} = (-9223372036854775807)::bigint - 1
        then {{ high }} || pg_catalog.decode('7fffffffffffffff', 'hex')
      when {{ low }} = 0
        then pg_catalog.int8send((('x' || pg_catalog.encode({{ high }}, 'hex'))::bit(64)::bigint) - 1)
             || pg_catalog.decode('ffffffffffffffff', 'hex')
      else {{ high }} || pg_catalog.int8send({{ low }} - 1) end)
{%- endmacro %}
