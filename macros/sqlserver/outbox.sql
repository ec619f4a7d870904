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


{#-
  capture: trigger on SQL Server (protocol section 5): one AFTER INSERT, UPDATE, DELETE
  trigger on the source table writes the changed keys into the outbox inside the writer's
  own statement, so writers change nothing and pay no extra round trip. The outbox
  defaults give every row the writer's transaction id (one block per transaction, O2).
  An UPDATE records the keys of `deleted` and `inserted`: both when the key or the shard
  changed, once (`union`) when neither did. The writer needs rights on the source table
  only: the trigger reaches the outbox by ownership chaining (same owner, as for the
  procedures). TRUNCATE TABLE fires no DML trigger, so it is not captured.

  _sqlserver_capture_check: the statements that refuse a source that is not a table and
  run the trigger's insert over the source with `where 1 = 0`, so that a shard expression
  that names a missing column or does not give an integer fails the setup, naming it.
  _sqlserver_capture_statements: create or alter the trigger (capture: trigger), or drop
  it if it exists (capture: none, outbox mode), through sp_executesql.
-#}
{% macro _sqlserver_capture_check(c) %}
  {%- if c.capture != 'trigger' -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set check -%}
if object_id({{ c.source_lit }}, N'U') is null
    throw 51057, {{ lit('changefeed: capture: trigger needs a table, and ' ~ c.source_sql ~ ' is not one (or it does not exist)') }}, 1;
begin try
    {{ changefeed._sqlserver_exec(changefeed._sqlserver_capture_insert(c, [(c.source_sql, 's')], ' where 1 = 0')) }}
end try
begin catch
    set @msg = concat(
        {{ lit('changefeed: the shard expression ' ~ c.shard ~ ' of the feed ' ~ c.feed_id ~ ' does not work on ' ~ c.source_sql ~ ': ') }},
        error_message(), N' (it must give an int from the columns of one source row, never null)');
    throw 51058, @msg, 1;
end catch;
  {%- endset -%}
  {{ return([check]) }}
{% endmacro %}


{% macro _sqlserver_capture_statements(c) %}
  {%- set trigger = c.capture_trigger -%}
  {%- if c.capture == 'trigger' -%}
    {%- set ddl -%}
create or alter trigger {{ trigger.sql }} on {{ c.source_sql }}
after insert, update, delete
as
begin
    set nocount on;
    {{ changefeed._sqlserver_capture_insert(c, [('inserted', 'i'), ('deleted', 'd')]) }};
end
    {%- endset -%}
    {{ return([changefeed._sqlserver_exec(ddl)]) }}
  {%- elif c.mode == 'outbox' -%}
    {{ return(['if object_id(' ~ trigger.lit ~ ', N\'TR\') is not null\n    '
               ~ changefeed._sqlserver_exec('drop trigger ' ~ trigger.sql)]) }}
  {%- endif -%}
  {{ return([]) }}
{% endmacro %}


{#- An event for every row a dbt model's table already has, when feed_post_hook creates its
    feed: the trigger's own insert over the whole table (as _postgres_sql_seed). -#}
{% macro _sqlserver_sql_seed(c) %}
  {{ return('set nocount on;\n' ~ changefeed._sqlserver_capture_insert(c, [(c.source_sql, 's')]) ~ ';') }}
{% endmacro %}


{#- `insert into <outbox> (shard_id, <keys>) select (<shard>), a.<keys> from <relation> as a
    [union select ...]`: the trigger's statement, and setup's check of the expression. -#}
{% macro _sqlserver_capture_insert(c, sources, where='') %}
  {%- set selects = [] -%}
  {%- for relation, alias in sources -%}
    {%- set keys = [] -%}
    {%- for key in c.key_names -%}
      {%- do keys.append(alias ~ '.' ~ key) -%}
    {%- endfor -%}
    {%- do selects.append('select (' ~ c.shard ~ '), ' ~ keys | join(', ') ~ ' from ' ~ relation ~ ' as ' ~ alias ~ where) -%}
  {%- endfor -%}
  {{ return('insert into ' ~ c.n.outbox.sql ~ ' (shard_id, ' ~ c.key_names | join(', ') ~ ')\n    '
            ~ selects | join('\n    union\n    ')) }}
{% endmacro %}
