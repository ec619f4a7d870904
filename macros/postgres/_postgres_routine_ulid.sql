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
