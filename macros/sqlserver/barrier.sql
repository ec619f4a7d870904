{#-
  [barrier_acquire:<feed>] (protocol section 7), called after your commit: the position
  and, in outbox mode, a sequence value at or above the order_sequence of every outbox row
  committed before the call. The position is the shard's highest ULID in the feed table
  (one backward step of its primary key; 16 zero bytes if none), which covers every event
  committed before the call. Not the head: that also covers blocks of writes still in
  flight, and one of them dying would hold the barrier closed until it is reaped.
-#}
{% macro _sqlserver_routine_barrier_acquire(c) -%}
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


{#-
  [barrier_check:<feed>] (protocol section 7): released when the safe point has reached
  the barrier's position and (outbox mode) no outbox row of the shard at or below its
  sequence value is left. The outbox is checked under the mover lock in shared mode, so a
  mover half-way through its transaction is waited for, not skipped; only rows of
  uncommitted writers are skipped, and those committed after the barrier was acquired.
-#}
{% macro _sqlserver_routine_barrier_check(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.barrier_check.sql }}
    @shard_id int,
    @position varbinary(max),  -- checked: 16 bytes (51065)
    @outbox_sequence bigint = null,
    @released bit = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 7)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;
    declare @safe_point binary(16), @at binary(16){% if c.mode == 'outbox' %}, @rc int, @name nvarchar(255), @msg nvarchar(2048){% endif %};

    if @shard_id is null or @position is null
        throw 51045, N'changefeed: barrier_check needs @shard_id and @position (from barrier_acquire)', 1;
    {{ changefeed._sqlserver_sql_require_ulid(c, n.barrier_check, '@position', '@at', 4) }}
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}
    {{ changefeed._sqlserver_sql_safe_point_heads(c, 4) }}
    select @safe_point = sp.safe_point
    from (
        {{ changefeed._sqlserver_sql_safe_point_query(c, 8) }}
    ) as sp
    where sp.shard_id = @shard_id;
    set @released = case when isnull(@safe_point, {{ c.zero16 }}) >= @at then 1 else 0 end;
{%- if c.mode == 'outbox' %}
    if @released = 1 and @outbox_sequence is not null
    begin
        -- Transaction-owned, in a transaction of its own: an interrupted call (a client
        -- timeout) is rolled back by xact_abort and so gives the lock back, where a
        -- session-owned lock would stay with the (pooled) connection and hold every mover
        -- of the shard off. Released explicitly too, for a caller inside a transaction.
        set @name = concat({{ c.lock_prefix_lit }}, @shard_id, N'/mover');
        begin transaction;
        exec @rc = sp_getapplock
            @Resource = @name, @LockMode = N'Shared', @LockOwner = N'Transaction',
            @LockTimeout = 30000, @DbPrincipal = N'public';
        if @rc < 0
        begin
            commit;
            set @msg = concat(N'changefeed: barrier_check could not take the mover lock of ', {{ c.feed_lit }}, N' shard ', @shard_id, N' (sp_getapplock returned ', @rc, N')');
            throw 51046, @msg, 1;
        end;
        if exists (
            select 1 from {{ n.outbox.sql }} with (readcommittedlock, readpast)
            where shard_id = @shard_id and order_sequence <= @outbox_sequence)
            set @released = 0;
        exec sp_releaseapplock @Resource = @name, @LockOwner = N'Transaction', @DbPrincipal = N'public';
        commit;
    end;
{%- endif %}
    select @released as released;
end
{%- endmacro %}
