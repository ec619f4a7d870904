{#-
  [release:<feed>] (blocking mode): after a rollback, abandon this connection's pending
  write and give back its lock. Safe to call at any time outside a transaction; without
  a write in progress it does nothing.
-#}
{% macro _sqlserver_sql_release(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.release.sql }}
as
begin
    -- changefeed protocol {{ c.version }}, blocking mode (docs/protocol.md section 4)
    set nocount on;
    set xact_abort on;

    declare
        @shard_id int = convert(int, session_context({{ c.key_s }})),
        @write_id uniqueidentifier = convert(uniqueidentifier, session_context({{ c.key_w }})),
        @name nvarchar(255) = convert(nvarchar(255), session_context({{ c.key_n }}));

    if @@trancount > 0
        throw 51015, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.release.sql ~ ' must be called after the rollback, outside any transaction') }}, 1;
    if @write_id is not null
        update {{ n.session.sql }}
        set state = 2, ended_at = sysutcdatetime(), end_reason = N'released'
        where shard_id = @shard_id and session_id = @@spid and write_id = @write_id and state = 0;
    {{ changefeed._sqlserver_sql_release_lock(c, 4) }}
end
{%- endmacro %}
