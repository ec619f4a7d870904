{#-
  T-SQL fragment, in its own short transaction: burn generation @g of shard @shard_id
  (protocol 4.2 and section 6). Marks the generation's pending sessions abandoned, moves
  the state to generation @g + 1 and records the incident, all or nothing. The state
  update is a compare-and-set on (@g, @time1, @high1, @low1), the values sampled when the
  holder was judged stalled, so a lock call that happened since then cancels the burn.

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
{{ p }}    delete from @holders;
{{ p }}    update w
{{ p }}    set state = 2, ended_at = sysutcdatetime(), end_reason = {{ changefeed._sqlserver_literal(reason) }}
{{ p }}    output deleted.session_id, deleted.write_id, deleted.first_ulid
{{ p }}        into @holders (session_id, write_id, first_ulid)
{{ p }}    from {{ c.n.session.sql }} as w with (readcommittedlock, readpast)
{{ p }}    where w.shard_id = @shard_id and w.state = 0 and w.generation = @g;
{{ p }}    update {{ c.n.state.sql }}
{{ p }}    set generation = generation + 1
{{ p }}    where
{{ p }}        shard_id = @shard_id
{{ p }}        and generation = @g
{{ p }}        and (time = @time1 or (time is null and @time1 is null))
{{ p }}        and ulid_high = @high1
{{ p }}        and ulid_low = @low1;
{{ p }}    if @@rowcount = 1
{{ p }}    begin
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
