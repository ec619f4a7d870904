{#-
  T-SQL fragment: the block of one transaction (protocol section 3).
  In:  @t (the wanted time), @st_time, @st_high, @st_low (the shard's state).
  Out: @b_time, @b_high, @b_start.
  A later time gets a fresh ulid_high (48-bit ms time, then 2 random bytes) and a fresh
  random, block-aligned start with bit 62 clear; the same time continues the state's
  block, unless continuing would wrap the byte order (@st_low = 0: the previous block
  ended at -1) or overflow the bigint, in which case the time moves on by 1 ms.
-#}
{% macro _sqlserver_sql_block(c, depth=0) -%}
{%- set p = ' ' * depth -%}
if @st_time is null or @t > @st_time
{{ p }}    set @b_time = @t;
{{ p }}else if @st_low <> 0 and @st_low <= {{ c.max_continue }}
{{ p }}    set @b_time = @st_time;
{{ p }}else
{{ p }}    set @b_time = dateadd(millisecond, 1, @st_time);
{{ p }}if @st_time is not null and @b_time = @st_time
{{ p }}    select @b_high = @st_high, @b_start = @st_low;
{{ p }}else
{{ p }}    select
{{ p }}        @b_high = convert(binary(6), datediff_big(millisecond, '1970-01-01', @b_time)) + crypt_gen_random(2),
{{ p }}        @b_start = convert(bigint, crypt_gen_random(8)) & convert(bigint, {{ c.fresh_mask }});
{%- endmacro %}


{#-
  T-SQL fragment, inside a transaction: the state row of shard @shard_id under an update
  lock held to the commit (the lock every allocation takes, section 3), read into @st_time,
  @st_high, @st_low; created first if the shard has none. The range lock of (updlock,
  holdlock) keeps a concurrent creator out until the commit. Movers and snapshot_begin
  allocate after it; lock calls lock the row themselves (writer.sql).
-#}
{% macro _sqlserver_sql_state_for_update(c, depth=0) -%}
{%- set p = ' ' * depth -%}
select @st_time = time, @st_high = ulid_high, @st_low = ulid_low
{{ p }}from {{ c.n.state.sql }} with (updlock, holdlock, rowlock)
{{ p }}where shard_id = @shard_id;
{{ p }}if @@rowcount = 0
{{ p }}begin
{{ p }}    insert into {{ c.n.state.sql }} (shard_id, time, ulid_high, ulid_low, generation)
{{ p }}    values (@shard_id, null, 0x0000000000000000, 0, 0);
{{ p }}    select @st_time = null, @st_high = 0x0000000000000000, @st_low = 0;
{{ p }}end;
{%- endmacro %}


{#-
  [ulid:<feed>](@v) (blocking mode; protocol section 3): the ULID of sequence value @v in
  this connection's write, ulid_high || int8(block_start + i) with i = @v - seq_start - 1.
  A function cannot raise, so errors are conversion errors that carry the message.
  Schema-bound (it reads no table): otherwise SQL Server assumes it reads data, and
  `insert into <feed> select ulid(...)` gets a serial plan and a Halloween spool.
-#}
{% macro _sqlserver_routine_ulid(c) -%}
{%- set n = c.n -%}
create or alter function {{ n.ulid.sql }}(@v bigint)
returns binary(16)
with schemabinding
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
