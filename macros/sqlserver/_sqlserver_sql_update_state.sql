{#-
  [update_state:<feed>] (blocking mode; protocol 4.4): publish the write and release the
  lock. No parameters: everything comes from session_context and the session row, so the
  client can send `exec [update_state:<feed>]; commit;` as one batch (one round trip).
  Only the session row is compare-and-set (pending -> committed); the state row is not
  touched, because the lock call already allocated the block and moved the state past it.
  So the next writer takes the lock and allocates while this commit is still under way,
  and the session row, locked from here to the end of the commit, tells its reaper and any
  burner to leave this write alone.
-#}
{% macro _sqlserver_sql_update_state(c) -%}
{%- set n = c.n -%}
{%- set feed = c.feed_lit -%}
create or alter procedure {{ n.update_state.sql }}
as
begin
    -- changefeed protocol {{ c.version }}, blocking mode (docs/protocol.md 4.4)
    set nocount on;
    set xact_abort on;

    declare
        @msg nvarchar(2048),
        @shard_id int,
        @write_id uniqueidentifier,
        @name nvarchar(255),
        @reason nvarchar(20),
        @g int,
        @g_now int,
        @progress bigint;

    set @shard_id = convert(int, session_context({{ c.key_s }}));
    set @write_id = convert(uniqueidentifier, session_context({{ c.key_w }}));
    set @name = convert(nvarchar(255), session_context({{ c.key_n }}));
    if @write_id is null
        throw 51010, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.update_state.sql ~ ' found no write in progress on this connection; call ' ~ n.lock.sql ~ ' before the transaction') }}, 1;
    if @@trancount = 0
        throw 51011, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.update_state.sql ~ ' must run inside the writer''s transaction, in the same batch as its commit: exec ' ~ n.update_state.sql ~ '; commit;') }}, 1;

    begin try
        -- 1. Compare-and-set: pending -> committed. No row means the write was abandoned
        -- (burned after a stall, tombstoned, reaped or released) and can never commit.
        update {{ n.session.sql }}
        set state = 1, ended_at = sysutcdatetime(), end_reason = N'committed'
        where shard_id = @shard_id and session_id = @@spid and write_id = @write_id and state = 0;
        if @@rowcount = 0
        begin
            select @reason = end_reason, @g = generation
            from {{ n.session.sql }}
            where shard_id = @shard_id and session_id = @@spid and write_id = @write_id;
            -- A dirty read: it never waits, and it only words the message.
            select @g_now = generation
            from {{ n.state.sql }} with (readuncommitted)
            where shard_id = @shard_id;
            set @msg = concat(
                N'changefeed: write ', @write_id, N' on ', {{ feed }}, N' shard ', @shard_id,
                N' was abandoned (', isnull(@reason, N'its session row was replaced'),
                case when @g <> @g_now then concat(N'; lock generation ', @g, N' -> ', @g_now) end,
                N'); roll back and retry');
            throw 51012, @msg, 1;
        end;

        -- 2. Progress for waiting writers, then give back the lock and forget the write.
        set @progress = next value for {{ n.sequence.sql }};
        {{ changefeed._sqlserver_sql_release_lock(c, 8) }}
    end try
    begin catch
        if @@trancount > 0
            rollback;
        {{ changefeed._sqlserver_sql_release_lock(c, 8) }}
        if error_number() = 3960
        begin
            set @msg = concat(
                N'changefeed: write ', @write_id, N' on ', {{ feed }}, N' shard ', @shard_id,
                N' was abandoned while it ran (snapshot update conflict on its session row); roll back and retry');
            throw 51014, @msg, 1;
        end;
        throw;
    end catch;
end
{%- endmacro %}
