{#- PL/pgSQL statements: a fresh block for millisecond `ms` (protocol section 3, step 2):
    high = ts48(ms) || 2 random bytes; start = 8 random bytes with bit 62 cleared and
    aligned to the block. The random bytes come from gen_random_uuid() (core, strong),
    taking only its random bytes (a v4 UUID fixes 6 bits in bytes 6 and 8). -#}
{% macro _postgres_sql_fresh_block(ctx, ms, high, start, rand) %}
    {{ rand }} := pg_catalog.uuid_send(pg_catalog.gen_random_uuid());
    {{ high }} := pg_catalog.substr(pg_catalog.int8send({{ ms }}), 3, 6) || pg_catalog.substr({{ rand }}, 11, 2);
    {{ start }} := (('x' || pg_catalog.encode(pg_catalog.substr({{ rand }}, 1, 6) || pg_catalog.substr({{ rand }}, 8, 1)
        || pg_catalog.substr({{ rand }}, 10, 1), 'hex'))::bit(64)::bigint) & ({{ ctx['block_mask'] }}::bigint);
{%- endmacro %}
