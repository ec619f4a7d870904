{#-
  ULID allocation (protocol sections 2 and 3): the ulid(v) routine a blocking writer numbers
  its rows with, and the SQL pieces of block allocation shared by the lock call (writer.sql)
  and the outbox mover (outbox.sql): the next block of a shard, a fresh block, the ULID
  just below a block, a ULID's block edges, and timestamps as epoch milliseconds.
-#}


{#- ulid:<feed>(v bigint) -> bytea: the ULID numbered v from the feed sequence within the
    write in progress on this connection (protocol section 3): ulid_high || int8(block_start
    + i) with i = v - seq_start - 1, range-guarded to [0, 2^block_bits).
    Called once per row, so it is kept cheap: SECURITY INVOKER (it reads no table, only this
    session's setting), no SET clause, every name qualified. -#}
{% macro _postgres_routine_ulid(ctx) %}
  {%- set body -%}
declare
  a text[] := pg_catalog.string_to_array(pg_catalog.current_setting({{ ctx['lit_guc'] }}, true), ' ');
  i bigint;
begin
  if a[3] is null then
    raise exception using errcode = 'CF004',
      message = 'changefeed: no write is in progress on this connection for feed ' || {{ ctx['lit_feed'] }},
      hint = 'Call the procedure ' || {{ changefeed._postgres_literal(ctx['q']['lock']) }} || ' outside a transaction first.';
  end if;
  i := v - a[1]::bigint - 1;
  if i is null or i < 0 or i >= {{ ctx['block'] }} then
    raise exception using errcode = 'CF003',
      message = 'changefeed: ulid offset ' || coalesce(i::text, 'null')
        || ' is outside this transaction''s block [0, 2^{{ ctx['block_bits'] }}) on feed ' || {{ ctx['lit_feed'] }},
      hint = 'Number rows with nextval(' || {{ changefeed._postgres_literal(ctx['lit_sequence']) }}
        || ') after the lock call; one transaction may write at most 2^{{ ctx['block_bits'] }} events.';
  end if;
  return pg_catalog.decode(a[3], 'hex') || pg_catalog.int8send(a[2]::bigint + i);
end
  {%- endset -%}
  {{ return('create or replace function ' ~ ctx['q']['ulid'] ~ '(v bigint)
returns bytea
language plpgsql volatile
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- PL/pgSQL statements: the next block of a shard (protocol section 3, steps 1-4), for the
    lock call and the outbox mover alike. On entry `ms` and `high` hold the shard's current
    time and ulid_high and `next` its next free low half; `want_ms` is the time the write
    asks for (its hint, or now). On exit `ms`, `high` and `start` describe the block. -#}
{% macro _postgres_sql_next_block(ctx, shard, want_ms, ms, high, next, start, rand, fresh) %}
    {{ fresh }} := {{ want_ms }} > {{ ms }};
    if {{ fresh }} then
      {{ ms }} := {{ want_ms }};
    else
      {{ start }} := {{ next }};
      -- Headroom rule (step 4): continuing from 0 would sort below the block that ended
      -- at -1, and the next free start must fit in a bigint.
      if {{ start }} = 0 or {{ start }} > {{ ctx['max_low_start'] }}::bigint then
        {{ ms }} := {{ ms }} + 1;
        {{ fresh }} := true;
      end if;
    end if;
    if {{ ms }} > {{ ctx['max_ms'] }} then
      raise exception using errcode = 'CF007',
        message = 'changefeed: feed ' || {{ ctx['lit_feed'] }} || ' shard ' || {{ shard }}::text
          || ' has reached the end of the ULID time range';
    end if;
    if {{ fresh }} then
{{ changefeed._postgres_sql_fresh_block(ctx, ms, high, start, rand) }}
    end if;
{%- endmacro %}


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


{#- SQL expression: a timestamptz as whole Unix milliseconds (exact: extract returns numeric). -#}
{% macro _postgres_sql_epoch_ms(ts) %}
(pg_catalog.floor(extract(epoch from {{ ts }}) * 1000)::bigint)
{%- endmacro %}
