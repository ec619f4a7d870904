{#-
  [update_state:<feed>] (blocking mode; protocol 4.4): publish the write and release the
  lock. No parameters: everything comes from session_context and the session row, so the
  client can send `exec [update_state:<feed>]; commit;` as one batch (one round trip).
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
        @b_time datetime2(3),
        @b_high binary(8),
        @b_start bigint,
        @e_time datetime2(3),
        @e_high binary(8),
        @e_low bigint,
        @progress bigint;
    declare @write table (
        generation int not null,
        time datetime2(3) not null,
        ulid_high binary(8) not null,
        block_start bigint not null,
        expected_time datetime2(3) null,
        expected_ulid_high binary(8) not null,
        expected_ulid_low bigint not null);

    set @shard_id = convert(int, session_context({{ c.key_s }}));
    set @write_id = convert(uniqueidentifier, session_context({{ c.key_w }}));
    set @name = convert(nvarchar(255), session_context({{ c.key_n }}));
    if @write_id is null
        throw 51010, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.update_state.sql ~ ' found no write in progress on this connection; call ' ~ n.lock.sql ~ ' before the transaction') }}, 1;
    if @@trancount = 0
        throw 51011, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.update_state.sql ~ ' must run inside the writer''s transaction, in the same batch as its commit: exec ' ~ n.update_state.sql ~ '; commit;') }}, 1;

    begin try
        -- 1. pending -> committed; no row means the write was abandoned.
        update {{ n.session.sql }}
        set state = 1, ended_at = sysutcdatetime(), end_reason = N'committed'
        output
            inserted.generation, inserted.time, inserted.ulid_high, inserted.block_start,
            inserted.expected_time, inserted.expected_ulid_high, inserted.expected_ulid_low
            into @write
        where shard_id = @shard_id and session_id = @@spid and write_id = @write_id and state = 0;
        if @@rowcount = 0
        begin
            select @reason = end_reason
            from {{ n.session.sql }}
            where shard_id = @shard_id and session_id = @@spid and write_id = @write_id;
            set @msg = concat(
                N'changefeed: write ', @write_id, N' on ', {{ feed }}, N' shard ', @shard_id,
                N' was abandoned (', isnull(@reason, N'its session row was replaced'),
                N'); roll back and retry');
            throw 51012, @msg, 1;
        end;
        select
            @g = generation, @b_time = time, @b_high = ulid_high, @b_start = block_start,
            @e_time = expected_time, @e_high = expected_ulid_high, @e_low = expected_ulid_low
        from @write;

        -- 2. Compare-and-set: the generation and the state this block was computed from.
        update {{ n.state.sql }}
        set time = @b_time, ulid_high = @b_high, ulid_low = @b_start + {{ c.block }}
        where
            shard_id = @shard_id
            and generation = @g
            and (time = @e_time or (time is null and @e_time is null))
            and ulid_high = @e_high
            and ulid_low = @e_low;
        if @@rowcount = 0
        begin
            select @g_now = generation
            from {{ n.state.sql }} with (readuncommitted)
            where shard_id = @shard_id;
            if @g_now <> @g
                set @msg = concat(
                    N'changefeed: the lock of ', {{ feed }}, N' shard ', @shard_id,
                    N' was burned after a stall (generation ', @g, N' -> ', @g_now,
                    N'); this transaction must roll back');
            else
                set @msg = concat(
                    N'changefeed: the state of ', {{ feed }}, N' shard ', @shard_id,
                    N' moved during write ', @write_id, N'; this transaction must roll back');
            throw 51013, @msg, 1;
        end;

        -- 3. Progress for waiting writers, then give back the lock and forget the write.
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
                N' was abandoned or its lock burned while it ran (snapshot update conflict); roll back and retry');
            throw 51014, @msg, 1;
        end;
        throw;
    end catch;
end
{%- endmacro %}
