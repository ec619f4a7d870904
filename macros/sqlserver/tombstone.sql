{#-
  [tombstone:<feed>] (protocol section 6): a consumer marks a stale pending write
  abandoned, so that it can never commit (invariant S3: this update and the writer's
  update_state both need state = 0 on the same row; exactly one wins). The winner then
  burns the shard's lock generation and records the incident, so that waiting writers
  stop waiting for the stale holder. Returns whether this call won (@won and a row).
  Sessions before the state row, as lock calls (burns, which take the state row first,
  never wait for a session row).
-#}
{% macro _sqlserver_routine_tombstone(c) -%}
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
    {{ changefeed._sqlserver_sql_refuse_implicit_transactions(51040, n.tombstone, 4) }}
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


{#-
  T-SQL fragment, in its own short transaction: burn generation @g of shard @shard_id
  (protocol 4.2 and section 6). Marks the generation's pending sessions abandoned, moves
  the state to generation @g + 1 and records the incident, all or nothing. It is a
  compare-and-set on (@g, @time1, @high1, @low1), the values sampled when the holder was
  judged stalled, so a lock call that happened since then cancels the burn. The samples
  were dirty reads; the compare is made on the committed row, read under an update lock
  first: a lock call whose short transaction was still open during both samples is waited
  for, so its session row is committed (and marked abandoned here) rather than locked and
  skipped, which would leave that holder live beside the next generation's. The state row
  is taken before the session rows, unlike lock calls and tombstones, but the sessions are
  read with readpast, so the burn never waits while holding it.

  Nothing is retired: the holder allocated its block in its lock call, so the state row is
  already past it and writers of the new generation allocate above it. A session whose
  update_state is committing is skipped (readpast): it gave the lock back before its
  commit, so it is not the holder, and waiting for it would make the burn wait for a
  client. The incident names the abandoned session with the highest block, the last lock
  holder.

  Sets @burned = 1 if this call burned the generation. A deadlock victim retries later.
-#}
{% macro _sqlserver_sql_burn(c, reason, depth=0) -%}
{%- set p = ' ' * depth -%}
set @burned = 0;
{{ p }}begin try
{{ p }}    begin transaction;
{{ p }}    select @g_now = generation
{{ p }}    from {{ c.n.state.sql }} with (updlock, rowlock)
{{ p }}    where
{{ p }}        shard_id = @shard_id
{{ p }}        and generation = @g
{{ p }}        and (time = @time1 or (time is null and @time1 is null))
{{ p }}        and ulid_high = @high1
{{ p }}        and ulid_low = @low1;
{{ p }}    if @@rowcount = 1
{{ p }}    begin
{{ p }}        delete from @holders;
{{ p }}        update w
{{ p }}        set state = 2, ended_at = sysutcdatetime(), end_reason = {{ changefeed._sqlserver_literal(reason) }}
{{ p }}        output deleted.session_id, deleted.write_id, deleted.first_ulid
{{ p }}            into @holders (session_id, write_id, first_ulid)
{{ p }}        from {{ c.n.session.sql }} as w with (readcommittedlock, readpast)
{{ p }}        where w.shard_id = @shard_id and w.state = 0 and w.generation = @g;
{{ p }}        update {{ c.n.state.sql }}
{{ p }}        set generation = generation + 1
{{ p }}        where shard_id = @shard_id and generation = @g;
{{ p }}        -- No pending session to name (the holder registered none): the incident names none.
{{ p }}        select @holder_session_id = null, @holder_write_id = null;
{{ p }}        select top (1) @holder_session_id = session_id, @holder_write_id = write_id
{{ p }}        from @holders
{{ p }}        order by first_ulid desc;
{{ p }}        insert into {{ c.n.incident.sql }} (
{{ p }}            shard_id, generation, detected_at, reason, holder_session_id, holder_write_id,
{{ p }}            detected_by_session_id, waited_ms)
{{ p }}        values (
{{ p }}            @shard_id, @g, sysutcdatetime(), {{ changefeed._sqlserver_literal(reason) }}, @holder_session_id,
{{ p }}            @holder_write_id, @@spid, datediff(millisecond, @waited_from, sysutcdatetime()));
{{ p }}        commit;
{{ p }}        set @burned = 1;
{{ p }}    end
{{ p }}    else
{{ p }}        rollback;
{{ p }}end try
{{ p }}begin catch
{{ p }}    if @@trancount > 0
{{ p }}        rollback;
{{ p }}    if error_number() <> 1205
{{ p }}        throw;
{{ p }}end catch;
{%- endmacro %}
