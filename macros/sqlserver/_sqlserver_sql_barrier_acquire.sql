{#-
  [barrier_acquire:<feed>] (protocol section 7), called after your commit: the position
  (the committed head) and, in outbox mode, a sequence value at or above the
  order_sequence of every outbox row committed before the call.
-#}
{% macro _sqlserver_sql_barrier_acquire(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.barrier_acquire.sql }}
    @shard_id int,
    @position binary(16) = null output,
    @outbox_sequence bigint = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 7)
    set nocount on;
    set transaction isolation level read committed;
    set @position = null;
    select @position = head from {{ n.state.sql }} where shard_id = @shard_id;
    set @position = isnull(@position, {{ c.zero16 }});
{%- if c.mode == 'outbox' %}
    set @outbox_sequence = next value for {{ n.sequence.sql }};
{%- else %}
    set @outbox_sequence = null;
{%- endif %}
    select @position as position, @outbox_sequence as outbox_sequence;
end
{%- endmacro %}
