{#-
  T-SQL fragment (outbox mode; protocol section 5): move committed outbox rows of shard
  @shard_id into the feed, in one short transaction of its own under the mover lock.
  Whole source transactions are taken, in order of their largest order_sequence (a
  transaction that changed a key after another committed it wrote its outbox row later, so
  it comes later: invariant O8), until @page_size events (a larger single transaction is
  taken whole); they are found among the first @page_size rows (or twice as many, until
  one transaction lies wholly among them). Each gets one block, at the running maximum of
  the time hints and the state's time.
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

{{ p }}    {{ changefeed._sqlserver_sql_state_for_update(c, depth + 4) }}

{{ p }}    -- Committed source transactions only: an uncommitted writer's rows are locked and
{{ p }}    -- skipped (readpast), and are moved by a later call, above the head (invariant O3).
{{ p }}    -- In order of each one's largest order_sequence (O8), a prefix of that order: the
{{ p }}    -- transactions whose rows all lie among the first @window rows are exactly those whose
{{ p }}    -- largest order_sequence is at most the window's last one; found through the
{{ p }}    -- (shard_id, txid) index. A window that holds no whole transaction is doubled.
{{ p }}    delete from @taken;
{{ p }}    set @window = @page_size;
{{ p }}    while 1 = 1
{{ p }}    begin
{{ p }}        delete from @groups;
{{ p }}        with w as (
{{ p }}            select top (@window) h.txid, h.order_sequence
{{ p }}            from {{ n.outbox.sql }} as h with (readcommittedlock, readpast)
{{ p }}            where h.shard_id = @shard_id
{{ p }}            order by h.order_sequence)
{{ p }}        insert into @groups (grp, txid, events, max_hint)
{{ p }}        select row_number() over (order by max(o.order_sequence)), o.txid, count(*), max(o.time_hint)
{{ p }}        from {{ n.outbox.sql }} as o with (readcommittedlock, readpast)
{{ p }}        where o.shard_id = @shard_id and o.txid in (select w.txid from w)
{{ p }}        group by o.txid
{{ p }}        having max(o.order_sequence) <= (select max(w.order_sequence) from w);
{{ p }}        if @@rowcount > 0
{{ p }}            break;
{{ p }}        select @seen = count(*)
{{ p }}        from (
{{ p }}            select top (@window) h.order_sequence
{{ p }}            from {{ n.outbox.sql }} as h with (readcommittedlock, readpast)
{{ p }}            where h.shard_id = @shard_id
{{ p }}            order by h.order_sequence) as w;
{{ p }}        if @seen < @window
{{ p }}            break;
{{ p }}        set @window = @window * 2;
{{ p }}    end;

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
{{ p }}        select @st_time = @b_time, @st_high = @b_high, @st_low = @b_start + convert(bigint, {{ c.block }});
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
  changed, once (`union`) when neither did. The union is staged in a table variable:
  NEXT VALUE FOR (the outbox's order_sequence default) is documented as refused in a
  statement with UNION (error 11721), and the insert into the outbox then has none.
  The writer needs rights on the source table only: the trigger reaches the outbox by
  ownership chaining (same owner, as for the procedures). TRUNCATE TABLE fires no DML
  trigger, so it is not captured.

  _sqlserver_capture_check: the statements that refuse a source that is not a table, run
  the trigger's select over the source with `where 1 = 0`, so that a shard expression that
  names a missing column fails the setup, naming it, and ask SQL Server for the type of
  the expression (sys.dm_exec_describe_first_result_set): anything but int, smallint or
  tinyint fails too, where the probe would let nvarchar, bigint, decimal or float through
  by implicit conversion to fail (or truncate) at every write.
  _sqlserver_capture_statements: create or alter the trigger (capture: trigger), or drop
  it if it exists (capture: none, outbox mode); see _sqlserver_source_ddl. The trigger
  first compares the key columns of the table it fires on with those setup found (their
  column_id and type, written into its text): a key column renamed, swapped, retyped or
  dropped since would make it capture other rows' keys, so it refuses the write (51067).
  One seek in sys.triggers and one in sys.columns per key column, per statement.
-#}
{% macro _sqlserver_capture_check(c) %}
  {%- if c.capture != 'trigger' -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set describe = 'select (' ~ c.shard ~ ') as shard_id from ' ~ c.source_sql ~ ' as s' -%}
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
if not exists (
    select 1
    from sys.dm_exec_describe_first_result_set({{ lit(describe) }}, null, 0)
    where system_type_name in (N'int', N'smallint', N'tinyint'))
begin
    set @msg = concat(
        {{ lit('changefeed: the shard expression ' ~ c.shard ~ ' of the feed ' ~ c.feed_id ~ ' gives ') }},
        isnull((
            select top (1) isnull(system_type_name, error_message)
            from sys.dm_exec_describe_first_result_set({{ lit(describe) }}, null, 0)), N'no column'),
        N' on ', {{ lit(c.source_sql) }},
        N'; it must give an int (int, smallint or tinyint): convert it, e.g. convert(int, ...), or use checksum(...) & 2147483647');
    throw 51058, @msg, 1;
end;
  {%- endset -%}
  {{ return([check]) }}
{% endmacro %}


{% macro _sqlserver_capture_statements(c) %}
  {%- set trigger = c.capture_trigger -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- if c.capture == 'trigger' -%}
    {%- set sql = changefeed._sqlserver_capture_ddl(c) -%}
    {#- The same text, enabled: nothing to do, and no schema lock on the source table. -#}
    {%- set unchanged -%}
exists (
    select 1 from sys.triggers as t
    where t.object_id = object_id({{ trigger.lit }}, N'TR') and t.is_disabled = 0
        and convert(varbinary(max), object_definition(t.object_id)) = convert(varbinary(max), @ddl))
    {%- endset -%}
    {#- An ALTER of a disabled trigger would leave it disabled: capture needs it firing. -#}
    {#- In an sp_executesql of its own, with its own variables. -#}
    {{ return([changefeed._sqlserver_exec('declare @key_columns nvarchar(max), @ddl nvarchar(max);\n' ~ sql ~ '\n'
        ~ changefeed._sqlserver_source_ddl(c, unchanged, none, 'enable trigger ' ~ trigger.sql ~ ' on ' ~ c.source_sql ~ ';'))]) }}
  {%- elif c.mode == 'outbox' -%}
    {{ return([changefeed._sqlserver_source_ddl(c, 'object_id(' ~ trigger.lit ~ ', N\'TR\') is null', 'drop trigger ' ~ trigger.sql)]) }}
  {%- endif -%}
  {{ return([]) }}
{% endmacro %}


{#- T-SQL that sets @key_columns and @ddl (nvarchar(max), declared by the caller) to the
    capture trigger's text as setup creates it: the key columns as the source has them now
    are baked into it (the placeholder literal, replaced), so a setup after a change
    re-creates the trigger. -#}
{% macro _sqlserver_capture_ddl(c) %}
  {%- set trigger = c.capture_trigger -%}
  {%- set lit = changefeed._sqlserver_literal -%}
    {%- set placeholder = 'changefeed: the key columns at setup' -%}
    {%- set ddl -%}
create or alter trigger {{ trigger.sql }} on {{ c.source_sql }}
after insert, update, delete
as
begin
    set nocount on;
    -- A source changed since setup would make capture name the wrong rows (51067).
    declare @source int = (select t.parent_id from sys.triggers as t where t.object_id = @@procid);
    declare @key_columns nvarchar(max) = {{ changefeed._sqlserver_capture_key_columns(c, '@source') }};
    if @key_columns <> {{ lit(placeholder) }}
    begin
        declare @msg nvarchar(2048) = concat(
            {{ lit('changefeed: the key columns of ' ~ c.source_sql ~ ' changed since the capture of the feed ' ~ c.feed_id ~ ' was set up (then: ') }},
            {{ lit(placeholder) }}, N'; now: ', @key_columns,
            {{ lit("); capture would name the wrong rows, so this write is refused. Run setup_feed (or upgrade_feed) with the feed's config again; if a key column's type changed, change it back, or tear the feed down and set it up again") }});
        throw 51067, @msg, 1;
    end;
    declare @changed table (shard_id int not null, {{ c.key_decls | join(', ') }});
    {{ changefeed._sqlserver_capture_insert(c, [('inserted', 'i'), ('deleted', 'd')], target='@changed') }};
    insert into {{ c.n.outbox.sql }} (shard_id, {{ c.key_names | join(', ') }})
    select shard_id, {{ c.key_names | join(', ') }} from @changed;
end
    {%- endset -%}
    {%- set ddl = ddl | trim -%}
    {%- set sql -%}
set @key_columns = {{ changefeed._sqlserver_capture_key_columns(c, 'object_id(' ~ c.source_lit ~ ', N\'U\')') }};
set @ddl = replace({{ lit(ddl) }}, {{ lit(lit(placeholder)) }},
    concat(N'N''', replace(@key_columns, N'''', N''''''), N''''));
    {%- endset -%}
  {{ return(sql) }}
{% endmacro %}



{#-
  [recapture:<changefeed schema>.<feed>] (capture: trigger; protocol 5.1): a database DDL
  trigger, as PostgreSQL's event trigger, on CREATE_TABLE and RENAME. When the statement
  created the source table, or renamed a table into its place, and that table lacks the
  capture trigger, it creates the trigger and records the table's object_id in
  capture_check, in the statement's transaction: no write to a re-created source commits
  without its event. A table that arrives with rows (renamed into place, or created with
  them) holds rows no event records, and the statement is refused (51074) and rolled back.
  Any other statement costs one object_id() lookup (the source gone: nothing to do) or
  two and one seek in sys.triggers. `with execute as 'dbo'`: it runs as the owner of the
  changefeed schema (PostgreSQL: security definer), so whoever re-creates the table needs
  no right on that schema; creating it needs IMPERSONATE on dbo, as capture_check does.
  It also needs ALTER ANY DATABASE DDL TRIGGER; a setup without that right leaves it out
  (then a re-created source fails reads with 51068 until setup runs). Created or dropped
  with the capture trigger.
-#}
{% macro _sqlserver_recapture_statements(c) %}
  {%- if c.mode != 'outbox' -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set recapture = c.n.recapture -%}
  {%- set listed = 'exists (select 1 from sys.triggers as t where t.parent_class = 0 and t.name = ' ~ recapture.lit -%}
  {%- if c.capture == 'trigger' -%}
    {%- set placeholder = 'changefeed: the capture trigger at setup' -%}
    {%- set fix = "; create the table empty and insert its rows (each write then has its event), or run dbt run-operation changefeed.teardown_feed and set the feed up again (a dbt model with a feed: never rebuild it, set full_refresh: false)" -%}
    {%- set ddl -%}
create or alter trigger {{ recapture.sql }}
on database
with execute as 'dbo'
for create_table, rename
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md 5.1)
    set nocount on;
    declare @source int = object_id({{ c.source_lit }}, N'U');
    if @source is null
        return;
    declare @event xml = eventdata();
    if isnull(@event.value(N'(/EVENT_INSTANCE/ObjectType)[1]', N'nvarchar(128)'), N'') <> N'TABLE'
        or isnull(object_id(concat(
            quotename(@event.value(N'(/EVENT_INSTANCE/SchemaName)[1]', N'nvarchar(128)')), N'.',
            quotename(isnull(@event.value(N'(/EVENT_INSTANCE/NewObjectName)[1]', N'nvarchar(128)'),
                @event.value(N'(/EVENT_INSTANCE/ObjectName)[1]', N'nvarchar(128)')))), N'U'), 0) <> @source
        or exists (
            select 1 from sys.triggers as t
            where t.object_id = object_id({{ c.capture_trigger.lit }}, N'TR') and t.parent_id = @source)
        return;
    if exists (select 1 from {{ c.source_sql }})
        throw 51074, {{ lit('changefeed: the source table ' ~ c.source_sql ~ ' of the feed ' ~ c.feed_id ~ ' (capture: trigger) would hold rows that no event records: it arrives with rows (renamed into its place, or created with them), so this statement is refused and rolled back' ~ fix) }}, 1;
    exec sp_executesql {{ lit(placeholder) }};
    declare @check nvarchar(max) = replace({{ lit(changefeed._sqlserver_routine_capture_check(c)) }},
        N'@recorded int = null,', concat(N'@recorded int = ', @source, N','));
    exec sp_executesql @check;
end
    {%- endset -%}
    {%- set sql -%}
declare @key_columns nvarchar(max), @ddl nvarchar(max), @recapture nvarchar(max);
{{ changefeed._sqlserver_capture_ddl(c) }}
set @recapture = replace({{ lit(ddl | trim) }}, {{ lit(lit(placeholder)) }},
    concat(N'N''', replace(@ddl, N'''', N''''''), N''''));
if has_perms_by_name(null, N'DATABASE', N'ALTER ANY DATABASE DDL TRIGGER') = 1
    and not {{ listed }} and t.is_disabled = 0
        and convert(varbinary(max), object_definition(t.object_id)) = convert(varbinary(max), @recapture))
begin
    exec sp_executesql @recapture;
    enable trigger {{ recapture.sql }} on database;
end;
    {%- endset -%}
    {{ return([changefeed._sqlserver_exec(sql)]) }}
  {%- endif -%}
  {{ return(['if ' ~ listed ~ ')\n    ' ~ changefeed._sqlserver_exec('drop trigger ' ~ recapture.sql ~ ' on database')]) }}
{% endmacro %}


{#- T-SQL expression: the key columns of the table `object_id` as SQL Server has them now,
    by name (`[name] column_id:system_type_id:user_type_id:max_length:precision:scale:collation`,
    `missing` for a column that is gone): a rename, a swap or a new type changes it (51067).
    One seek in sys.columns per key column. -#}
{% macro _sqlserver_capture_key_columns(c, object_id) %}
  {%- set parts = [] -%}
  {%- for key in c.key_names -%}
    {%- do parts.append(changefeed._sqlserver_literal(('; ' if not loop.first else '') ~ key ~ ' ')) -%}
    {%- do parts.append("isnull((select concat(k.column_id, N':', k.system_type_id, N':', k.user_type_id, N':', k.max_length, N':', k.[precision], N':', k.[scale], N':', k.collation_name)"
        ~ ' from sys.columns as k where k.object_id = ' ~ object_id ~ ' and k.name = '
        ~ changefeed._sqlserver_literal(key[1:-1] | replace(']]', ']')) ~ "), N'missing')") -%}
  {%- endfor -%}
  {{ return('concat(' ~ parts | join(', ') ~ ')') }}
{% endmacro %}


{#- T-SQL expression: the comparison that the capture trigger's text holds when it was set
    up for the key columns the source table has now (see _sqlserver_capture_statements). -#}
{% macro _sqlserver_capture_key_columns_baked(c) %}
  {{ return("concat(N'if @key_columns <> N''', replace("
      ~ changefeed._sqlserver_capture_key_columns(c, 'object_id(' ~ c.source_lit ~ ', N\'U\')')
      ~ ", N'''', N''''''), N'''')") }}
{% endmacro %}


{#-
  Creating, altering or dropping a trigger takes a schema-modification lock on the source
  table until setup commits. Waiting for it queues every later reader and writer of that
  table (even NOLOCK ones) behind the setup, so the DDL (and `after`, under the same lock
  timeout) runs only when needed (`skip_if` is false) and waits at most
  c.source_lock_timeout_ms (10 s; SET LOCK_TIMEOUT, which ends with the sp_executesql that
  sets it), then fails with 51061 and changes nothing. `ddl` none: the DDL is in the
  variable @ddl (the capture trigger, whose text setup completes).
-#}
{% macro _sqlserver_source_ddl(c, skip_if, ddl, after='') %}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set sql -%}
if not {{ skip_if }}
begin
    begin try
{%- if ddl is none %}
        exec sp_executesql {{ lit('set lock_timeout ' ~ c.source_lock_timeout_ms ~ ';\nexec sp_executesql @ddl;'
            ~ ('\n' ~ after if after else '')) }}, N'@ddl nvarchar(max)', @ddl;
{%- else %}
        {{ changefeed._sqlserver_exec('set lock_timeout ' ~ c.source_lock_timeout_ms ~ ';\n' ~ changefeed._sqlserver_exec(ddl)
            ~ ('\n' ~ after if after else '')) }}
{%- endif %}
    end try
    begin catch
        if error_number() = 1222
            throw 51061, {{ lit('changefeed: could not change the capture trigger of ' ~ c.source_sql ~ ' within '
                ~ c.source_lock_timeout_ms ~ ' ms: transactions on the table held it (a trigger change needs a schema lock on the table); nothing was changed, retry when the table is quieter') }}, 1;
        throw;
    end catch;
end;
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- An event for every row a dbt model's table already has, when feed_post_hook creates its
    feed: the trigger's own insert over the whole table (as _postgres_sql_seed). -#}
{% macro _sqlserver_sql_seed(c) %}
  {{ return('set nocount on;\n' ~ changefeed._sqlserver_capture_insert(c, [(c.source_sql, 's')]) ~ ';') }}
{% endmacro %}


{#- `insert into <outbox> (shard_id, <keys>) select (<shard>), a.<keys> from <relation> as a
    [union select ...]`: the trigger's statement (into its table variable, `target`), the
    seed of a model's feed, and setup's check of the expression. -#}
{% macro _sqlserver_capture_insert(c, sources, where='', target=none) %}
  {%- set selects = [] -%}
  {%- for relation, alias in sources -%}
    {%- set keys = [] -%}
    {%- for key in c.key_names -%}
      {%- do keys.append(alias ~ '.' ~ key) -%}
    {%- endfor -%}
    {%- do selects.append('select (' ~ c.shard ~ '), ' ~ keys | join(', ') ~ ' from ' ~ relation ~ ' as ' ~ alias ~ where) -%}
  {%- endfor -%}
  {{ return('insert into ' ~ (target or c.n.outbox.sql) ~ ' (shard_id, ' ~ c.key_names | join(', ') ~ ')\n    '
            ~ selects | join('\n    union\n    ')) }}
{% endmacro %}


{#-
  [capture_check:<feed>] (capture: trigger; protocol O6): fails with 51068 when the source
  table lost its capture trigger, has it disabled, or is not the table setup saw (dropped
  and re-created: another object_id). read_feed calls it at the head, where PostgreSQL's
  move_outbox raises CF011, so that a source whose writes are no longer captured stops the
  readers instead of going silent. It runs as its owner (the changefeed schema's, dbo):
  catalog views and object_id() show a caller only what it has permissions on, and the
  reader role has none on the source table; ownership chaining from read_feed (same
  owner) covers the EXECUTE, not the metadata. A source that does not exist has no writes
  to lose (as on PostgreSQL). Cost: two object_id() lookups and one seek in sys.triggers.
  The source's object_id at setup is written into the text (`@recorded int = null`
  replaced, _sqlserver_capture_check_statements); setup finds a stale one and repairs.
-#}
{% macro _sqlserver_routine_capture_check(c) -%}
{%- set lit = changefeed._sqlserver_literal -%}
{%- set fix = "; its writes since then are not in the feed. Run dbt run-operation changefeed.setup_feed with the feed's config to re-create the trigger, then re-emit the changes made meanwhile (for example update the affected rows)" -%}
create or alter procedure {{ c.n.capture_check.sql }}
with execute as owner
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md O6)
    set nocount on;
    declare
        @recorded int = null,
        @source int = object_id({{ c.source_lit }}, N'U'),
        @disabled bit,
        @cause nvarchar(400);
    if @source is null
        return;
    select @disabled = t.is_disabled
    from sys.triggers as t
    where t.object_id = object_id({{ c.capture_trigger.lit }}, N'TR') and t.parent_id = @source;
    set @cause = case
        when @source <> @recorded
            then concat(N'was dropped and re-created (object_id ', @recorded, N' at setup, ', @source, N' now)')
        when @disabled is null then {{ lit('has lost its capture trigger ' ~ c.capture_trigger.sql) }}
        when @disabled = 1 then {{ lit('has its capture trigger ' ~ c.capture_trigger.sql ~ ' disabled') }}
    end;
    if @cause is not null
    begin
        declare @msg nvarchar(2048) = concat(
            {{ lit('changefeed: the source table ' ~ c.source_sql ~ ' of the feed ' ~ c.feed_id ~ ' (capture: trigger) ') }},
            @cause, {{ lit(fix) }});
        throw 51068, @msg, 1;
    end;
end
{%- endmacro %}


{#- Create capture_check with the source's object_id as it is now (capture: trigger), or drop
    it (capture: none, outbox mode). In an sp_executesql of its own, with its own variable. -#}
{% macro _sqlserver_capture_check_statements(c) %}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- if c.capture == 'trigger' -%}
    {%- set sql -%}
declare @ddl nvarchar(max) = replace({{ lit(changefeed._sqlserver_routine_capture_check(c)) }},
    N'@recorded int = null,', {{ changefeed._sqlserver_capture_check_recorded(c) }});
exec sp_executesql @ddl;
    {%- endset -%}
    {{ return([changefeed._sqlserver_exec(sql)]) }}
  {%- elif c.mode == 'outbox' -%}
    {{ return(['if object_id(' ~ c.n.capture_check.lit ~ ', N\'P\') is not null\n    '
        ~ changefeed._sqlserver_exec('drop procedure ' ~ c.n.capture_check.sql)]) }}
  {%- endif -%}
  {{ return([]) }}
{% endmacro %}


{#- T-SQL expression: capture_check's declaration of the source's object_id as it is now;
    setup compares it with the procedure's text to find a re-created source. -#}
{% macro _sqlserver_capture_check_recorded(c) %}
  {{ return("concat(N'@recorded int = ', object_id(" ~ c.source_lit ~ ", N'U'), N',')") }}
{% endmacro %}
