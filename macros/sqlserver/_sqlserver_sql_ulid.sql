{#-
  [ulid:<feed>](@v) (blocking mode; protocol section 3): the ULID of sequence value @v in
  this connection's write, ulid_high || int8(block_start + i) with i = @v - seq_start - 1.
  A function cannot raise, so errors are conversion errors that carry the message.
-#}
{% macro _sqlserver_sql_ulid(c) -%}
{%- set n = c.n -%}
create or alter function {{ n.ulid.sql }}(@v bigint)
returns binary(16)
as
begin
    -- changefeed protocol {{ c.version }}, blocking mode (docs/protocol.md section 3)
    declare @u binary(24) = convert(binary(24), session_context({{ c.key_u }}));
    declare @i decimal(20, 0);
    if @u is null
        return convert(binary(16), convert(int, concat(
            N'changefeed: ulid(', @v, N') of ', {{ c.feed_lit }},
            N': no write in progress on this connection; call ', {{ changefeed._sqlserver_literal(n.lock.sql) }}, N' first')));
    set @i = convert(decimal(20, 0), @v) - convert(bigint, substring(@u, 17, 8)) - 1;
    if @i is null or @i < 0 or @i >= {{ c.block }}
        return convert(binary(16), convert(int, concat(
            N'changefeed: ulid offset ', @i, N' is outside this transaction''s block [0, 2^{{ c.bits }}); pass next value for ',
            {{ changefeed._sqlserver_literal(n.sequence.sql) }})));
    return convert(binary(16), substring(@u, 1, 8) + convert(binary(8), convert(bigint, substring(@u, 9, 8)) + convert(bigint, @i)));
end
{%- endmacro %}
