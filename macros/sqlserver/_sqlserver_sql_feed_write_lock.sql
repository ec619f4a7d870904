{#-
  [feed_write_lock:<feed>] (outbox mode): the shard's mover lock, owned by the caller's
  transaction (protocol section 5). read_feed takes it before moving the outbox.
-#}
{% macro _sqlserver_sql_feed_write_lock(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.feed_write_lock.sql }}
    @shard_id int,
    @lock_timeout int = -1,
    @lock_result int = null output
as
begin
    -- changefeed protocol {{ c.version }}, outbox mode (docs/protocol.md section 5)
    set nocount on;
    declare @name nvarchar(255) = concat({{ c.lock_prefix_lit }}, @shard_id, N'/mover');
    if @@trancount = 0
        throw 51030, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.feed_write_lock.sql ~ ' takes a transaction-owned lock; call it inside a transaction') }}, 1;
    exec @lock_result = sp_getapplock
        @Resource = @name, @LockMode = N'Exclusive', @LockOwner = N'Transaction',
        @LockTimeout = @lock_timeout, @DbPrincipal = N'public';
end
{%- endmacro %}
