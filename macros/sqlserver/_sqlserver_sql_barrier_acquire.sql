{#-
  [barrier_acquire:<feed>] (protocol section 7), called after your commit: the position
  and, in outbox mode, a sequence value at or above the order_sequence of every outbox row
  committed before the call. The position is the shard's highest ULID in the feed table
  (one backward step of its primary key; 16 zero bytes if none), which covers every event
  committed before the call. Not the head: that also covers blocks of writes still in
  flight, and one of them dying would hold the barrier closed until it is reaped.
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
    -- readpast: rows of writes still in flight are not committed before the call, and
    -- waiting for them would hold this call for a whole application transaction where
    -- reads lock (readcommittedlock: readpast needs locking reads under RCSI).
    select top (1) @position = ulid
    from {{ n.feed.sql }} with (readcommittedlock, readpast)
    where shard_id = @shard_id
    order by ulid desc;
    set @position = isnull(@position, {{ c.zero16 }});
{%- if c.mode == 'outbox' %}
    set @outbox_sequence = next value for {{ n.sequence.sql }};
{%- else %}
    set @outbox_sequence = null;
{%- endif %}
    select @position as position, @outbox_sequence as outbox_sequence;
end
{%- endmacro %}
