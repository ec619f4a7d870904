{#-
  [lock:<feed>] (blocking mode; protocol 4.1-4.3): take the shard's stall-proof lock,
  allocate the write's block and return it. Runs outside any transaction and commits its
  own work: the state row advanced past the block and the pending session, together, so
  that readers see the block pending before the application's transaction starts, and the
  next writer allocates above it without waiting for this write's commit.
-#}
{% macro _sqlserver_routine_lock(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.lock.sql }}
    @shard_id int,
    @time_hint datetime2(3) = null,
    @write_id uniqueidentifier = null output,
    @ulid_high binary(8) = null output,
    @ulid_low bigint = null output,
    @stall_timeout_ms int = null,
    @lock_probe_ms int = null
as
begin
    -- changefeed protocol {{ c.version }}, blocking mode (docs/protocol.md 4.1-4.3)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;

    declare
        @msg nvarchar(2048),
        @t datetime2(3),
        @g int,
        @g_now int,
        @rc int,
        @name nvarchar(255),
        @waited_from datetime2(7),
        @sessions0 varbinary(64),
        @sessions1 varbinary(64),
        @time0 datetime2(3),
        @high0 binary(8),
        @low0 bigint,
        @time1 datetime2(3),
        @high1 binary(8),
        @low1 bigint,
        @rest_ms int,
        @st_time datetime2(3),
        @st_high binary(8),
        @st_low bigint,
        @st_gen int,
        @b_time datetime2(3),
        @b_high binary(8),
        @b_start bigint,
        @seq_start bigint,
        @u binary(24),
        @burned bit,
        @holder_session_id int,
        @holder_write_id uniqueidentifier;
    declare @holders table (session_id int not null, write_id uniqueidentifier not null, first_ulid binary(16) not null);

    if @@trancount > 0
        throw 51001, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.lock.sql ~ ' must be called outside any transaction (autocommit), before the transaction that writes the feed') }}, 1;
    {{ changefeed._sqlserver_sql_refuse_implicit_transactions(51001, n.lock, 4) }}
    if @shard_id is null
        throw 51002, N'changefeed: @shard_id must not be NULL', 1;
    set @stall_timeout_ms = isnull(@stall_timeout_ms, {{ c.stall_timeout_ms }});
    set @lock_probe_ms = isnull(@lock_probe_ms, {{ c.lock_probe_ms }});
    if @lock_probe_ms < 0 or @stall_timeout_ms <= @lock_probe_ms
        throw 51003, N'changefeed: need 0 <= @lock_probe_ms < @stall_timeout_ms', 1;
    set @rest_ms = @stall_timeout_ms - @lock_probe_ms;
    set @t = isnull(@time_hint, sysutcdatetime());
    if @t < '1970-01-01'
        throw 51004, N'changefeed: @time_hint must not be before 1970-01-01, where ULID time starts', 1;

    -- One write at a time per connection and feed. A lock call that was interrupted may
    -- have left its lock taken but no write: release gives that back.
    if session_context({{ c.key_w }}) is not null
        throw 51006, {{ changefeed._sqlserver_literal('changefeed: a write on ' ~ c.feed_id ~ ' is already open on this connection; finish it (exec ' ~ n.update_state.sql ~ '; commit;) or roll back and exec ' ~ n.release.sql) }}, 1;
    exec {{ n.release.sql }};

    -- The first write to a shard creates its state row.
    if not exists (select 1 from {{ n.state.sql }} with (readuncommitted) where shard_id = @shard_id)
    begin
        begin try
            insert into {{ n.state.sql }} (shard_id, time, ulid_high, ulid_low, generation)
            values (@shard_id, null, 0x0000000000000000, 0, 0);
        end try
        begin catch
            if error_number() not in (2601, 2627)
                throw;
        end catch;
    end;

    begin try
        while 1 = 1
        begin
            -- 4.1: the lock name carries the shard's generation (incident count). A dirty
            -- read: it never waits, and a generation that is not committed yet is caught below.
            select @g = generation from {{ n.state.sql }} with (readuncommitted) where shard_id = @shard_id;
            set @name = concat({{ c.lock_prefix_lit }}, @shard_id, N'/', @g);
            -- Remember the name before taking the lock, so release can give it back even if
            -- this call is interrupted right after sp_getapplock.
            exec sp_set_session_context @key = {{ c.key_n }}, @value = @name;
            set @waited_from = sysutcdatetime();

            -- 4.2: a short wait first; only a queue or a stalled holder gets past it.
            exec @rc = sp_getapplock
                @Resource = @name, @LockMode = N'Exclusive', @LockOwner = N'Session',
                @LockTimeout = @lock_probe_ms, @DbPrincipal = N'public';
            if @rc = -1
            begin
                -- Sample this shard's progress, uncommitted work included: its state row
                -- (every lock call) and its session rows (every lock, update_state, release).
                -- Not the feed's sequence: other shards move it too.
                select @time0 = time, @high0 = ulid_high, @low0 = ulid_low
                from {{ n.state.sql }} with (readuncommitted)
                where shard_id = @shard_id;
                {{ changefeed._sqlserver_sql_session_progress(c, '@sessions0', 16) }}

                exec @rc = sp_getapplock
                    @Resource = @name, @LockMode = N'Exclusive', @LockOwner = N'Session',
                    @LockTimeout = @rest_ms, @DbPrincipal = N'public';
                if @rc = -1
                begin
                    select @g_now = generation, @time1 = time, @high1 = ulid_high, @low1 = ulid_low
                    from {{ n.state.sql }} with (readuncommitted)
                    where shard_id = @shard_id;
                    {{ changefeed._sqlserver_sql_session_progress(c, '@sessions1', 20) }}
                    -- Someone else burned it: follow the new generation. Progress: a queue of
                    -- live writers, wait again. Neither: the holder is stalled, burn its name.
                    if @g_now = @g
                        and @sessions1 = @sessions0
                        and (@time1 = @time0 or (@time1 is null and @time0 is null))
                        and @high1 = @high0
                        and @low1 = @low0
                    begin
                        {{ changefeed._sqlserver_sql_burn(c, 'stall', 24) }}
                    end;
                    continue;
                end;
            end;
            if @rc < 0
            begin
                set @msg = concat(N'changefeed: sp_getapplock returned ', @rc, N' for lock ', @name);
                throw 51005, @msg, 1;
            end;

            -- 4.3: we hold the name; one short transaction allocates the block.
            begin transaction;
            -- 1. While we hold the lock, any other pending write of this shard is dead,
            -- rolled back or burned, except one whose update_state is committing: it gave
            -- the lock back just before its commit and its session row stays locked until
            -- the commit ends. readpast leaves that one alone, so a lock call never waits
            -- for another write's commit (readcommittedlock: readpast needs locking reads
            -- where READ_COMMITTED_SNAPSHOT is on). Sessions before the state row, as
            -- tombstones (burns lock the state row first but never wait for a session).
            update w
            set state = 2, ended_at = sysutcdatetime(), end_reason = N'reaped'
            from {{ n.session.sql }} as w with (readcommittedlock, readpast)
            where w.shard_id = @shard_id and w.state = 0 and w.session_id <> @@spid;
            -- 2. The state row under an update lock. Only lock calls, burns and tombstones
            -- change it, each in a short transaction of its own, so this never waits for an
            -- application transaction.
            select @st_time = time, @st_high = ulid_high, @st_low = ulid_low, @st_gen = generation
            from {{ n.state.sql }} with (updlock, holdlock, rowlock)
            where shard_id = @shard_id;
            if @st_gen = @g
                break;
            -- The name was burned while we waited for it: undo the reaping (it may have hit
            -- the new generation's holder), give the name back, follow the new one.
            rollback;
            while applock_mode(N'public', @name, N'Session') <> N'NoLock'
                exec sp_releaseapplock @Resource = @name, @LockOwner = N'Session', @DbPrincipal = N'public';
        end;

        -- 3. This write's block (protocol section 3), and the state row moved past it now:
        -- the next lock call allocates above it while this write is still in flight, and
        -- readers keep below it through the pending session (section 6).
        {{ changefeed._sqlserver_sql_block(c, 8) }}
        update {{ n.state.sql }}
        set time = @b_time, ulid_high = @b_high, ulid_low = @b_start + convert(bigint, {{ c.block }})
        where shard_id = @shard_id;
        set @seq_start = next value for {{ n.sequence.sql }};
        set @write_id = newid();

        -- 4. The pending session row, with the state the block was allocated from.
        update {{ n.session.sql }}
        set
            write_id = @write_id,
            state = 0,
            generation = @g,
            time = @b_time,
            ulid_high = @b_high,
            block_start = @b_start,
            first_ulid = convert(binary(16), @b_high + convert(binary(8), @b_start)),
            expected_time = @st_time,
            expected_ulid_high = @st_high,
            expected_ulid_low = @st_low,
            started_at = sysutcdatetime(),
            ended_at = null,
            end_reason = null
        where shard_id = @shard_id and session_id = @@spid;
        if @@rowcount = 0
            insert into {{ n.session.sql }} (
                shard_id, session_id, write_id, state, generation, time, ulid_high, block_start,
                first_ulid, expected_time, expected_ulid_high, expected_ulid_low, started_at)
            values (
                @shard_id, @@spid, @write_id, 0, @g, @b_time, @b_high, @b_start,
                convert(binary(16), @b_high + convert(binary(8), @b_start)), @st_time, @st_high,
                @st_low, sysutcdatetime());

        -- 5. The connection's write: ulid() reads (ulid_high, block_start, seq_start),
        -- update_state and release read the shard, the write id and the lock name.
        set @u = convert(binary(24), @b_high + convert(binary(8), @b_start) + convert(binary(8), @seq_start));
        exec sp_set_session_context @key = {{ c.key_u }}, @value = @u;
        exec sp_set_session_context @key = {{ c.key_w }}, @value = @write_id;
        exec sp_set_session_context @key = {{ c.key_s }}, @value = @shard_id;

        -- 6. Publish the block and its pending session together, before the application's
        -- transaction starts. This commit need not wait for its log flush: the
        -- application's fully durable commit comes later in this database's log and flushes
        -- it too; after a crash both are lost together. Where the database's
        -- DELAYED_DURABILITY is DISABLED (the default) the option is ignored and the commit
        -- is fully durable.
        commit transaction with (delayed_durability = on);
        select @ulid_high = @b_high, @ulid_low = @b_start;
    end try
    begin catch
        if @@trancount > 0
            rollback;
        {{ changefeed._sqlserver_sql_release_lock(c, 8) }}
        throw;
    end catch;
end
{%- endmacro %}


{#-
  T-SQL fragment: a fingerprint of shard @shard_id's session rows, read without waiting
  (dirty), into the varbinary variable `into`. Every lock call writes a new write_id and
  started_at, every update_state and release a new state and ended_at, so any writer
  activity on the shard changes it (protocol 4.2, progress()).
-#}
{% macro _sqlserver_sql_session_progress(c, into, depth=0) -%}
{%- set p = ' ' * depth -%}
select {{ into }} =
{{ p }}    convert(binary(4), count(*))
{{ p }}    + convert(binary(4), isnull(checksum_agg(binary_checksum(write_id, state)), 0))
{{ p }}    + convert(binary(9), isnull(max(started_at), '0001-01-01'))
{{ p }}    + convert(binary(9), isnull(max(ended_at), '0001-01-01'))
{{ p }}from {{ c.n.session.sql }} with (readuncommitted)
{{ p }}where shard_id = @shard_id;
{%- endmacro %}


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
{% macro _sqlserver_routine_update_state(c) -%}
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


{#-
  [release:<feed>] (blocking mode): after a rollback, abandon this connection's pending
  write and give back its lock. Safe to call at any time outside a transaction; without
  a write in progress it does nothing.
-#}
{% macro _sqlserver_routine_release(c) -%}
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
    {{ changefeed._sqlserver_sql_refuse_implicit_transactions(51015, n.release, 4) }}
    if @write_id is not null
        update {{ n.session.sql }}
        set state = 2, ended_at = sysutcdatetime(), end_reason = N'released'
        where shard_id = @shard_id and session_id = @@spid and write_id = @write_id and state = 0;
    {{ changefeed._sqlserver_sql_release_lock(c, 4) }}
end
{%- endmacro %}


{#-
  T-SQL fragment: give back the shard lock named @name (every hold of it, in case it was
  taken twice) and forget this connection's write on the feed.
-#}
{% macro _sqlserver_sql_release_lock(c, depth=0) -%}
{%- set p = ' ' * depth -%}
if @name is not null
{{ p }}    while applock_mode(N'public', @name, N'Session') <> N'NoLock'
{{ p }}        exec sp_releaseapplock @Resource = @name, @LockOwner = N'Session', @DbPrincipal = N'public';
{{ p }}exec sp_set_session_context @key = {{ c.key_u }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_w }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_s }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_n }}, @value = null;
{%- endmacro %}


{#-
  [feed_write_lock:<feed>] (outbox mode): the shard's mover lock, owned by the caller's
  transaction (protocol section 5). read_feed takes it before moving the outbox.
-#}
{% macro _sqlserver_routine_feed_write_lock(c) -%}
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


{#-
  [guard:<feed>] (protocol 4.5, blocking mode): the feed table's insert trigger. The writer
  role may insert into the feed table, so without it a writer could insert rows into
  another shard, or with ULIDs it made up, at or below a safe point that readers have
  passed, and they would never be read. Every inserted row must lie in the shard and the
  block of this connection's write in progress (from session_context, as update_state
  finds it): else the statement fails (51066; 51010 without a write, or after it was
  published; 51012 when it was abandoned, as update_state would) and the trigger's error
  rolls the transaction back. One seek of the session row per statement, not per row.
-#}
{% macro _sqlserver_routine_guard(c) -%}
{%- set n = c.n -%}
create or alter trigger {{ n.guard.sql }} on {{ n.feed.sql }} after insert
as
begin
    -- changefeed protocol {{ c.version }}, blocking mode (docs/protocol.md 4.5)
    set nocount on;
    if not exists (select 1 from inserted)
        return;
    declare
        @msg nvarchar(2048),
        @shard_id int = convert(int, session_context({{ c.key_s }})),
        @write_id uniqueidentifier = convert(uniqueidentifier, session_context({{ c.key_w }})),
        @state tinyint,
        @first binary(16),
        @last binary(16),
        @bad_shard int,
        @bad_ulid binary(16);
    if @write_id is not null
        select
            @state = state,
            @first = first_ulid,
            @last = convert(binary(16), ulid_high + convert(binary(8), block_start + convert(bigint, {{ c.block_minus_1 }})))
        from {{ n.session.sql }}
        where shard_id = @shard_id and session_id = @@spid and write_id = @write_id;
    if @first is null or @state = 1
        throw 51010, {{ changefeed._sqlserver_literal('changefeed: an insert into ' ~ n.feed.sql ~ ' without a write in progress on this connection; call ' ~ n.lock.sql ~ ' first and number the rows with ' ~ n.ulid.sql ~ '(next value for ' ~ n.sequence.sql ~ ')') }}, 1;
    if @state <> 0
    begin
        set @msg = concat(
            N'changefeed: write ', @write_id, N' on ', {{ c.feed_lit }}, N' shard ', @shard_id,
            N' was abandoned (burned after a stall, tombstoned or reaped); roll back and retry');
        throw 51012, @msg, 1;
    end;
    select top (1) @bad_shard = shard_id, @bad_ulid = ulid
    from inserted
    where shard_id <> @shard_id or ulid < @first or ulid > @last;
    if @bad_ulid is not null
    begin
        set @msg = concat(
            N'changefeed: a row of shard ', @bad_shard, N' with ULID ', lower(convert(varchar(32), @bad_ulid, 2)),
            N' is outside this write''s shard ', @shard_id, N' and block [', lower(convert(varchar(32), @first, 2)),
            N', ', lower(convert(varchar(32), @last, 2)), N'] on ', {{ c.feed_lit }},
            N'; insert events with shard_id = the locked shard and ulid = ', {{ c.n.ulid.lit }},
            N'(next value for ...) (SqlServerFeed.write, SqlServerWrite.ulid_sql)');
        throw 51066, @msg, 1;
    end;
end
{%- endmacro %}
