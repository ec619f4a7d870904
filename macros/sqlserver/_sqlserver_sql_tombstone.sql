{#-
  [tombstone:<feed>] (protocol section 6): a consumer marks a stale pending write
  abandoned, so that it can never commit (invariant S3: this update and the writer's
  update_state both need state = 0 on the same row; exactly one wins). The winner then
  burns the shard's lock generation and records the incident, so that waiting writers
  stop waiting for the stale holder. Returns whether this call won (@won and a row).
  Sessions before the state row: the same lock order as lock calls and burns.
-#}
{% macro _sqlserver_sql_tombstone(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.tombstone.sql }}
    @shard_id int,
    @session_id int,
    @write_id uniqueidentifier,
    @won bit = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 6)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;

    declare @g int, @started_at datetime2(7);
    declare @tombstoned table (generation int not null, started_at datetime2(7) not null);

    if @@trancount > 0
        throw 51040, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.tombstone.sql ~ ' runs in a transaction of its own; call it outside any transaction') }}, 1;
    set @won = 0;
    begin try
        begin transaction;
        update {{ n.session.sql }}
        set state = 2, ended_at = sysutcdatetime(), end_reason = N'tombstoned'
        output deleted.generation, deleted.started_at into @tombstoned (generation, started_at)
        where shard_id = @shard_id and session_id = @session_id and write_id = @write_id and state = 0;
        if @@rowcount = 1
        begin
            set @won = 1;
            select @g = generation, @started_at = started_at from @tombstoned;
            -- Only if the session's generation is still the current one: writers waiting
            -- for the stale holder's lock name move on to the next name. No block is
            -- retired: the lock call already moved the state row past this write's block.
            update {{ n.state.sql }}
            set generation = generation + 1
            where shard_id = @shard_id and generation = @g;
            if @@rowcount = 1
                insert into {{ n.incident.sql }} (
                    shard_id, generation, detected_at, reason, holder_session_id, holder_write_id,
                    detected_by_session_id, waited_ms)
                values (
                    @shard_id, @g, sysutcdatetime(), N'tombstone', @session_id, @write_id, @@spid,
                    datediff(millisecond, @started_at, sysutcdatetime()));
        end;
        commit;
    end try
    begin catch
        if @@trancount > 0
            rollback;
        throw;
    end catch;
    select @won as won;
end
{%- endmacro %}
