{#-
  T-SQL fragment (outbox mode; protocol section 5): move committed outbox rows of shard
  @shard_id into the feed, in one short transaction of its own under the mover lock.
  Whole source transactions are taken, in order of their first order_sequence, until
  @page_size events (a larger single transaction is taken whole); each gets one block, at
  the running maximum of the time hints and the state's time.
-#}
{% macro _sqlserver_sql_move_outbox(c, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set n = c.n -%}
begin try
{{ p }}    begin transaction;
{{ p }}    exec {{ n.feed_write_lock.sql }} @shard_id = @shard_id, @lock_timeout = 30000, @lock_result = @rc output;
{{ p }}    if @rc < 0
{{ p }}    begin
{{ p }}        set @msg = concat(
{{ p }}            N'changefeed: could not take the outbox mover lock of ', {{ c.feed_lit }}, N' shard ', @shard_id,
{{ p }}            N' (sp_getapplock returned ', @rc, N')');
{{ p }}        throw 51021, @msg, 1;
{{ p }}    end;

{{ p }}    select @st_time = time, @st_high = ulid_high, @st_low = ulid_low
{{ p }}    from {{ n.state.sql }} with (updlock, holdlock, rowlock)
{{ p }}    where shard_id = @shard_id;
{{ p }}    if @@rowcount = 0
{{ p }}    begin
{{ p }}        insert into {{ n.state.sql }} (shard_id, time, ulid_high, ulid_low, generation)
{{ p }}        values (@shard_id, null, 0x0000000000000000, 0, 0);
{{ p }}        select @st_time = null, @st_high = 0x0000000000000000, @st_low = 0;
{{ p }}    end;

{{ p }}    -- Committed source transactions only: an uncommitted writer's rows are locked and
{{ p }}    -- skipped (readpast), and are moved by a later call, above the head (invariant O3).
{{ p }}    delete from @groups;
{{ p }}    delete from @taken;
{{ p }}    insert into @groups (grp, txid, events, max_hint)
{{ p }}    select row_number() over (order by min(o.order_sequence)), o.txid, count(*), max(o.time_hint)
{{ p }}    from {{ n.outbox.sql }} as o with (readcommittedlock, readpast)
{{ p }}    where
{{ p }}        o.shard_id = @shard_id
{{ p }}        and o.txid in (
{{ p }}            select top (@page_size) h.txid
{{ p }}            from {{ n.outbox.sql }} as h with (readcommittedlock, readpast)
{{ p }}            where h.shard_id = @shard_id
{{ p }}            order by h.order_sequence)
{{ p }}    group by o.txid;

{{ p }}    with running as (
{{ p }}        select grp, sum(events) over (order by grp rows between unbounded preceding and current row) as total
{{ p }}        from @groups
{{ p }}    )
{{ p }}    delete g
{{ p }}    from @groups as g
{{ p }}    inner join running as r on r.grp = g.grp
{{ p }}    where g.grp > 1 and r.total > @page_size;

{{ p }}    select @grp = 1, @groups_count = count(*), @events = isnull(sum(events), 0) from @groups;
{{ p }}    while @grp <= @groups_count
{{ p }}    begin
{{ p }}        select @t = max_hint from @groups where grp = @grp;
{{ p }}        {{ changefeed._sqlserver_sql_block(c, depth + 8) }}
{{ p }}        update @groups set ulid_high = @b_high, block_start = @b_start where grp = @grp;
{{ p }}        select @st_time = @b_time, @st_high = @b_high, @st_low = @b_start + {{ c.block }};
{{ p }}        set @grp += 1;
{{ p }}    end;

{{ p }}    if @groups_count > 0
{{ p }}    begin
{{ p }}        insert into @taken (order_sequence, txid, {{ c.key_names | join(', ') }})
{{ p }}        select o.order_sequence, o.txid, o.{{ c.key_names | join(', o.') }}
{{ p }}        from {{ n.outbox.sql }} as o with (readcommittedlock, readpast)
{{ p }}        inner join @groups as g on g.txid = o.txid
{{ p }}        where o.shard_id = @shard_id;
{{ p }}        if @@rowcount <> @events
{{ p }}        begin
{{ p }}            set @msg = concat(N'changefeed: the outbox of ', {{ c.feed_lit }}, N' shard ', @shard_id, N' changed under the mover lock');
{{ p }}            throw 51022, @msg, 1;
{{ p }}        end;

{{ p }}        insert into {{ n.feed.sql }} (shard_id, ulid, {{ c.key_names | join(', ') }})
{{ p }}        select
{{ p }}            @shard_id,
{{ p }}            convert(binary(16), g.ulid_high + convert(binary(8),
{{ p }}                g.block_start + row_number() over (partition by g.grp order by k.order_sequence) - 1)),
{{ p }}            k.{{ c.key_names | join(', k.') }}
{{ p }}        from @taken as k
{{ p }}        inner join @groups as g on g.txid = k.txid;

{{ p }}        delete o
{{ p }}        from {{ n.outbox.sql }} as o
{{ p }}        inner join @taken as k on k.order_sequence = o.order_sequence
{{ p }}        where o.shard_id = @shard_id;
{{ p }}        if @@rowcount <> @events
{{ p }}        begin
{{ p }}            set @msg = concat(N'changefeed: the outbox of ', {{ c.feed_lit }}, N' shard ', @shard_id, N' changed under the mover lock');
{{ p }}            throw 51022, @msg, 1;
{{ p }}        end;

{{ p }}        update {{ n.state.sql }}
{{ p }}        set time = @st_time, ulid_high = @st_high, ulid_low = @st_low
{{ p }}        where shard_id = @shard_id;
{{ p }}        set @progress = next value for {{ n.sequence.sql }};
{{ p }}    end;
{{ p }}    commit;
{{ p }}end try
{{ p }}begin catch
{{ p }}    if @@trancount > 0
{{ p }}        rollback;
{{ p }}    throw;
{{ p }}end catch;
{%- endmacro %}
