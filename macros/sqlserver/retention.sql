{#-
  Retention (protocol section 8.1) on SQL Server: the retention table (per shard the
  horizon, the newest ULID retention removed) and the consumer table (registered cursors),
  the procedures retain, save_cursor and forget_consumer, the check that makes a reader
  below the horizon fail with 51062 (PostgreSQL's CF013), and sqlserver__apply_retention,
  the dbt operation.

  Contract: sqlserver__apply_retention returns what postgres__apply_retention returns: a
  list with one mapping per shard it looked at, in shard order: {shard_id, removed,
  horizon, held_for_consumers, slowest_consumer} (horizon as 32 hex digits, none if
  nothing was ever removed), and none when dbt is only parsing.
-#}


{#- The kinds retention added (keys of the context's names): a feed registered without
    them is set up by an older package, and setup or upgrade adds them (context.sql,
    setup.sql). -#}
{% macro _sqlserver_retention_kinds() %}
  {{ return(['retention', 'consumer', 'retention_pk', 'consumer_pk', 'retain', 'save_cursor', 'forget_consumer']) }}
{% endmacro %}


{#- The dbt operation: checks the options before any SQL runs, then the registry (the feed
    must be set up, by a package with retention), then runs retain once and logs one line
    per shard. -#}
{% macro sqlserver__apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_identity(changefeed._feed_relation(relation)) -%}
  {%- do changefeed._feed_retention_policy_check(max_age_seconds, keep_last, override_consumers, shard) -%}
  {%- set c = changefeed._sqlserver_feed_context(spec) -%}
  {%- set row = changefeed._sqlserver_registry_row(c) -%}
  {%- if row is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is not set up, so it has no events to remove;"
        ~ " check the relation, or set it up with `dbt run-operation changefeed.setup_feed`") }}
  {%- endif -%}
  {%- set names = row['names'] -%}
  {%- if 'retain' not in names -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a package without retention;"
        ~ " run `dbt run-operation changefeed.upgrade_feed` with its config first (it adds the retention"
        ~ " procedures and tables and keeps the data)") }}
  {%- endif -%}
  {%- set retain = c.schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(names['retain']) -%}
  {#- A plain exec, not INSERT ... EXEC, which would run every chunk of retain in one
      transaction; the horizon is read from horizon_hex (dbt's result tables hold text,
      not bytes). -#}
  {%- set run -%}
exec {{ retain }}
    @max_age_ms = {{ (max_age_seconds * 1000) if max_age_seconds is not none else 'null' }},
    @keep_last = {{ keep_last if keep_last is not none else 'null' }},
    @override_consumers = {{ 1 if override_consumers else 0 }},
    @shard_id = {{ shard if shard is not none else 'null' }};
  {%- endset -%}
  {%- set table = run_query(run) -%}
  {%- set result = [] -%}
  {%- for row in table.rows -%}
    {%- do result.append({
        'shard_id': row['shard_id'] | int,
        'removed': row['removed'] | int,
        'horizon': row['horizon_hex'],
        'held_for_consumers': row['held_for_consumers'] | int,
        'slowest_consumer': row['slowest_consumer'],
    }) -%}
  {%- endfor -%}
  {%- do changefeed._feed_retention_log(spec, result) -%}
  {{ return(result) }}
{% endmacro %}


{#- The retention and consumer tables, each created when missing: setup creates them for a
    new feed, and setup (updated) or upgrade_feed for a feed set up by a package without
    retention. The reader may read both (protocol section 9). Through sp_executesql, so
    that the grants resolve the tables created earlier in the same batch. -#}
{% macro _sqlserver_retention_tables_statements(c) %}
  {%- set n = c.n -%}
  {%- set retention_ddl -%}
create table {{ n.retention.sql }} (
    shard_id int not null,
    horizon binary(16) not null,
    removed bigint not null,
    updated_at datetime2(3) not null,
    constraint {{ n.retention_pk.sql }} primary key (shard_id)
)
  {%- endset -%}
  {%- set consumer_ddl -%}
create table {{ n.consumer.sql }} (
    consumer nvarchar(200) not null,
    shard_id int not null,
    [cursor] binary(16) not null,
    updated_at datetime2(3) not null,
    constraint {{ n.consumer_pk.sql }} primary key (consumer, shard_id)
)
  {%- endset -%}
  {{ return([
      'if object_id(' ~ n.retention.lit ~ ', N\'U\') is null\n    ' ~ changefeed._sqlserver_exec(retention_ddl),
      'if object_id(' ~ n.consumer.lit ~ ', N\'U\') is null\n    ' ~ changefeed._sqlserver_exec(consumer_ddl),
      changefeed._sqlserver_exec('grant select on object::' ~ n.retention.sql ~ ' to ' ~ n.reader_role.sql),
      changefeed._sqlserver_exec('grant select on object::' ~ n.consumer.sql ~ ' to ' ~ n.reader_role.sql),
  ]) }}
{% endmacro %}


{#- T-SQL for read_feed and save_cursor: a cursor below the shard's horizon has missed an
    event that retention removed, so the call fails with 51062 instead of skipping it
    (protocol 8.1, C5). Expects @shard_id, @after (the cursor, binary(16)), @msg and @horizon. -#}
{% macro _sqlserver_sql_retention_check(c, depth=0) -%}
{%- set p = ' ' * depth -%}
set @horizon = null;
{{ p }}select @horizon = horizon from {{ c.n.retention.sql }} where shard_id = @shard_id;
{{ p }}if @horizon > @after
{{ p }}begin
{{ p }}    set @msg = concat(
{{ p }}        N'changefeed: a reader of ', {{ c.feed_lit }}, N' shard ', @shard_id,
{{ p }}        N' fell behind retention: its cursor ', lower(convert(varchar(32), @after, 2)),
{{ p }}        N' lies below events that retention removed (up to ', lower(convert(varchar(32), @horizon, 2)),
{{ p }}        N'), so it cannot continue without skipping them. Re-snapshot: copy the source table again and',
{{ p }}        N' continue from the shard''s current safe point (docs/operations.md, Retention); register the new',
{{ p }}        N' cursor with save_cursor so that retention keeps the events it has not read.');
{{ p }}    throw 51062, @msg, 1;
{{ p }}end;
{%- endmacro %}


{#-
  [retain:<feed>] (protocol 8.1): removes, per shard (every shard, or @shard_id), the
  events at or below the safe point that no keep rule keeps: an event is kept if its
  ULID's time is within @max_age_ms of now, or it is in the block of one of the newest
  @keep_last events (a null rule keeps nothing by itself; at least one must be given), or,
  unless @override_consumers, it lies above a registered consumer's cursor (a consumer
  without a cursor on the shard keeps all of it). Result: one row per shard (shard_id,
  removed, horizon, held_for_consumers, slowest_consumer, horizon_hex: the horizon as 32
  lower-case hex digits, for callers whose result tables hold no bytes, like dbt's).

  The delete runs in chunks of 10,000 events in ULID order, each in a transaction of its
  own that takes the feed's retention lock (an applock owned by the transaction, so a
  cancelled call gives it back) and records the horizon with its delete: a chunk that
  committed is never undone by a later one failing, and a large backlog never holds
  millions of row locks at once (lock escalation is off on the feed table). The safe
  point and the consumers' lowest cursor are read once per shard, before its first chunk
  (C6: a consumer registered during the run may find events gone, and then fails by C5).
  Owner only: nothing is granted.
-#}
{% macro _sqlserver_routine_retain(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.retain.sql }}
    @max_age_ms bigint = null,
    @keep_last bigint = null,
    @override_consumers bit = 0,
    @shard_id int = null
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 8.1)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;

    declare
        @rc int,
        @msg nvarchar(2048),
        @only int = @shard_id,
        @safe_point binary(16),
        @age_limit binary(16),
        @keep_limit binary(16),
        @before binary(16),
        @upto binary(16),
        @nth binary(16),
        @cut_ms bigint,
        @min_cursor binary(16),
        @slowest nvarchar(200),
        @policy bigint,
        @removed bigint,
        @max binary(16);
    declare @shards table (shard_id int not null primary key);
    declare @chunk table (ulid binary(16) not null primary key);
    declare @out table (
        shard_id int not null primary key,
        removed bigint not null,
        horizon binary(16) null,
        held_for_consumers bigint not null,
        slowest_consumer nvarchar(200) null);
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}

    if @max_age_ms is null and @keep_last is null
        throw 51063, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.retain.sql ~ ' needs a policy: @max_age_ms (remove events older than this), @keep_last (keep the newest N events of each shard), or both') }}, 1;
    if @max_age_ms < 0 or @keep_last < 0 or @override_consumers is null
        throw 51063, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.retain.sql ~ ': @max_age_ms and @keep_last must be 0 or more, and @override_consumers 0 or 1') }}, 1;

    if @max_age_ms is not null
    begin
        set @cut_ms = datediff_big(millisecond, '1970-01-01', sysutcdatetime()) - @max_age_ms;
        -- The smallest ULID of the cut's millisecond: events below it are older.
        set @age_limit = case
            when @cut_ms <= 0 then {{ c.zero16 }}
            else convert(binary(16), substring(convert(binary(8), @cut_ms), 3, 6) + 0x00000000000000000000)
        end;
    end;

    if @only is null
        insert into @shards (shard_id) select shard_id from {{ n.state.sql }};
    else
        insert into @shards (shard_id) select shard_id from {{ n.state.sql }} where shard_id = @only;

    while 1 = 1
    begin
        set @shard_id = null;
        select top (1) @shard_id = shard_id from @shards order by shard_id;
        if @shard_id is null
            break;
        delete from @shards where shard_id = @shard_id;

        {{ changefeed._sqlserver_sql_shard_safe_point(c, 8) }}

        -- The newest @keep_last events keep their whole blocks, so that no transaction
        -- loses its older events; fewer events than that keep them all.
        set @keep_limit = null;
        if @keep_last > 0
        begin
            set @nth = null;
            select @nth = f.ulid
            from {{ n.feed.sql }} as f
            where f.shard_id = @shard_id and f.ulid <= @safe_point
            order by f.ulid desc
            offset @keep_last - 1 rows fetch next 1 rows only;
            set @keep_limit = case
                when @nth is null then {{ c.zero16 }}
                else convert(binary(16), substring(@nth, 1, 8)
                    + convert(binary(8), convert(bigint, substring(@nth, 9, 8)) & convert(bigint, {{ c.align_mask }})))
            end;
        end;
        -- Removed: at or below @upto and (when not null) below @before.
        set @before = case
            when @age_limit is null then @keep_limit
            when @keep_limit is null or @age_limit < @keep_limit then @age_limit
            else @keep_limit
        end;

        set @slowest = null;
        set @min_cursor = null;
        select top (1) @slowest = c.consumer, @min_cursor = isnull(k.[cursor], {{ c.zero16 }})
        from (select distinct consumer from {{ n.consumer.sql }}) as c
        left join {{ n.consumer.sql }} as k on k.consumer = c.consumer and k.shard_id = @shard_id
        order by isnull(k.[cursor], {{ c.zero16 }}), c.consumer;

        if @before is null
            select @policy = count_big(*) from {{ n.feed.sql }}
            where shard_id = @shard_id and ulid <= @safe_point;
        else
            select @policy = count_big(*) from {{ n.feed.sql }}
            where shard_id = @shard_id and ulid <= @safe_point and ulid < @before;

        set @upto = case
            when @override_consumers = 0 and @min_cursor < @safe_point then @min_cursor
            else @safe_point
        end;
        set @removed = 0;
        while 1 = 1
        begin
            begin transaction;
            exec @rc = sp_getapplock
                @Resource = {{ c.retention_lock_lit }}, @LockMode = N'Exclusive', @LockOwner = N'Transaction',
                @LockTimeout = 60000, @DbPrincipal = N'public';
            if @rc < 0
                throw 51064, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.retain.sql ~ ' waited 60 s for the retention lock of the feed, which another retention run holds; run it again later') }}, 1;
            delete from @chunk;
            if @before is null
                insert into @chunk (ulid)
                select top (10000) ulid from {{ n.feed.sql }}
                where shard_id = @shard_id and ulid <= @upto
                order by ulid;
            else
                insert into @chunk (ulid)
                select top (10000) ulid from {{ n.feed.sql }}
                where shard_id = @shard_id and ulid <= @upto and ulid < @before
                order by ulid;
            set @max = (select max(ulid) from @chunk);
            if @max is null
            begin
                commit;
                break;
            end;
            -- The horizon commits with the delete (C5): a reader checks it after reading.
            update {{ n.retention.sql }} with (updlock, serializable)
            set horizon = case when horizon < @max then @max else horizon end,
                removed = removed + (select count_big(*) from @chunk),
                updated_at = sysutcdatetime()
            where shard_id = @shard_id;
            if @@rowcount = 0
                insert into {{ n.retention.sql }} (shard_id, horizon, removed, updated_at)
                select @shard_id, @max, count_big(*), sysutcdatetime() from @chunk;
            delete f
            from {{ n.feed.sql }} as f
            inner join @chunk as k on k.ulid = f.ulid
            where f.shard_id = @shard_id;
            set @removed = @removed + @@rowcount;
            commit;
        end;

        insert into @out (shard_id, removed, horizon, held_for_consumers, slowest_consumer)
        select @shard_id, @removed, (select horizon from {{ n.retention.sql }} where shard_id = @shard_id),
            case when @policy > @removed then @policy - @removed else 0 end, @slowest;
    end;

    select shard_id, removed, horizon, held_for_consumers, slowest_consumer,
        lower(convert(varchar(32), horizon, 2)) as horizon_hex
    from @out
    order by shard_id;
end
{%- endmacro %}


{#-
  [save_cursor:<feed>] (protocol 8.1): registers (or moves) @consumer's cursor on
  @shard_id, which retention will not pass. A consumer calls it after it has stored its
  output and cursor durably. A cursor below the horizon fails with 51062: that consumer
  already missed events. The parameters are wider than what they accept, so that a
  too-long name or a cursor of another length is refused instead of cut to size.
-#}
{% macro _sqlserver_routine_save_cursor(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.save_cursor.sql }}
    @consumer nvarchar(max),
    @shard_id int,
    @cursor varbinary(max)
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 8.1)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;
    declare @msg nvarchar(2048), @after binary(16), @horizon binary(16);

    -- len() ignores trailing spaces; the appended dot keeps them counted.
    if @consumer is null or len(@consumer + N'.') - 1 not between 1 and 200
        throw 51063, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.save_cursor.sql ~ ' needs @consumer, a name of 1 to 200 characters') }}, 1;
    if @shard_id is null
        throw 51002, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.save_cursor.sql ~ ': @shard_id must not be NULL') }}, 1;
    {{ changefeed._sqlserver_sql_require_ulid(c, n.save_cursor, '@cursor', '@after', 4) }}

    {{ changefeed._sqlserver_sql_retention_check(c, 4) }}

    begin transaction;
    update {{ n.consumer.sql }} with (updlock, serializable)
    set [cursor] = @after, updated_at = sysutcdatetime()
    where consumer = @consumer and shard_id = @shard_id;
    if @@rowcount = 0
        insert into {{ n.consumer.sql }} (consumer, shard_id, [cursor], updated_at)
        values (@consumer, @shard_id, @after, sysutcdatetime());
    commit;
end
{%- endmacro %}


{#- [forget_consumer:<feed>] (protocol 8.1): unregisters @consumer on every shard, so that
    retention no longer keeps events for it. Result: forgotten, the cursors removed. -#}
{% macro _sqlserver_routine_forget_consumer(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.forget_consumer.sql }}
    @consumer nvarchar(max)
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 8.1)
    set nocount on;
    set xact_abort on;
    if @consumer is null
        throw 51063, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.forget_consumer.sql ~ ' needs @consumer, not NULL') }}, 1;
    delete from {{ n.consumer.sql }} where consumer = @consumer;
    select @@rowcount as forgotten;
end
{%- endmacro %}
