{#-
  T-SQL fragment, in its own short transaction: burn generation @g of shard @shard_id
  (protocol 4.2 and section 6). Marks the generation's pending sessions abandoned, moves
  the state to generation @g + 1 and records the incident, all or nothing. The state
  update is a compare-and-set on (@g, @time1, @high1, @low1), the values sampled when the
  holder was judged stalled, so a commit that happened since then cancels the burn.

  Burning also retires the block the stalled holder may have computed: ulid_low moves on
  by one block (unless the headroom rule already forces the next block to be fresh), so
  no writer of the new generation computes the same block and then waits on the
  holder's uncommitted rows in the feed's primary key.

  Sets @burned = 1 if this call burned the generation. A deadlock victim retries later.
-#}
{% macro _sqlserver_sql_burn(c, reason, depth=0) -%}
{%- set p = ' ' * depth -%}
set @burned = 0;
{{ p }}begin try
{{ p }}    begin transaction;
{{ p }}    delete from @holders;
{{ p }}    update {{ c.n.session.sql }}
{{ p }}    set state = 2, ended_at = sysutcdatetime(), end_reason = {{ changefeed._sqlserver_literal(reason) }}
{{ p }}    output deleted.session_id, deleted.write_id, deleted.started_at
{{ p }}        into @holders (session_id, write_id, started_at)
{{ p }}    where shard_id = @shard_id and state = 0 and generation = @g;
{{ p }}    update {{ c.n.state.sql }}
{{ p }}    set
{{ p }}        generation = generation + 1,
{{ p }}        ulid_low = case
{{ p }}            when ulid_low <> 0 and ulid_low <= {{ c.max_continue }} then ulid_low + {{ c.block }}
{{ p }}            else ulid_low
{{ p }}        end
{{ p }}    where
{{ p }}        shard_id = @shard_id
{{ p }}        and generation = @g
{{ p }}        and (time = @time1 or (time is null and @time1 is null))
{{ p }}        and ulid_high = @high1
{{ p }}        and ulid_low = @low1;
{{ p }}    if @@rowcount = 1
{{ p }}    begin
{{ p }}        select top (1) @holder_session_id = session_id, @holder_write_id = write_id
{{ p }}        from @holders
{{ p }}        order by started_at desc;
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
