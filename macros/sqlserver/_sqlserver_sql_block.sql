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
