{#-
  [read_feed:<feed>] (protocol section 8): one page of shard @shard_id after @cursor, up
  to the safe point, ending at a transaction boundary. In outbox mode it first moves the
  outbox when the page is not full (the reader is at the head).
  The page is returned as a result set (ulid, <keys>), or, for code written for
  mssql-changefeed, put into the caller's temporary table #read if one exists (emptied
  first, as mssql-changefeed did).
-#}
{% macro _sqlserver_routine_read_feed(c) -%}
{%- set n = c.n -%}
{%- set keys = c.key_names | join(', ') -%}
create or alter procedure {{ n.read_feed.sql }}
    @shard_id int,
    @cursor varbinary(max) = {{ c.zero16 }},  -- checked: 16 bytes (51065)
    @page_size int = 1000,
    @pagesize int = null  -- mssql-changefeed's name for @page_size
as
begin
    -- changefeed protocol {{ c.version }}, {{ c.mode }} mode (docs/protocol.md sections 5 and 8)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;

    declare
        @msg nvarchar(2048),
        @after binary(16),
        @horizon binary(16),
        @safe_point binary(16),
        @rows int,
        @last binary(16),
        @low bigint,
        @block_first binary(16),
        @block_last binary(16)
{%- if c.mode == 'outbox' %},
        @rc int,
        @t datetime2(3),
        @st_time datetime2(3),
        @st_high binary(8),
        @st_low bigint,
        @b_time datetime2(3),
        @b_high binary(8),
        @b_start bigint,
        @grp int,
        @groups_count int,
        @window bigint,
        @seen bigint,
        @events int,
        @progress bigint
{%- endif %};
    declare @page {{ n.read_type.sql }};
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}
{%- if c.mode == 'outbox' %}
    declare @groups table (
        grp int not null primary key,
        txid bigint not null unique,
        events int not null,
        max_hint datetime2(3) not null,
        ulid_high binary(8) null,
        block_start bigint null);
    declare @taken table (
        order_sequence bigint not null primary key,
        txid bigint not null,
        {{ c.key_decls | join(',\n        ') }});
{%- endif %}

    if @shard_id is null
        throw 51002, N'changefeed: @shard_id must not be NULL', 1;
    set @page_size = isnull(@pagesize, @page_size);
    if @page_size is null or @page_size < 1
        throw 51023, N'changefeed: @page_size must be at least 1', 1;
    {{ changefeed._sqlserver_sql_require_ulid(c, n.read_feed, '@cursor', '@after', 4) }}
{%- if c.mode == 'outbox' %}
    if @@trancount > 0
        throw 51020, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.read_feed.sql ~ ' moves the outbox in a transaction of its own; call it outside any transaction') }}, 1;
    {{ changefeed._sqlserver_sql_refuse_implicit_transactions(51020, n.read_feed, 4) }}
{%- endif %}

    {{ changefeed._sqlserver_sql_read_page(c, 4) }}
{%- if c.mode == 'outbox' %}

{%- if c.capture == 'trigger' %}

    -- At the head a source that lost its capture trigger fails the read (51068, protocol
    -- O6) before an empty outbox could pass for no writes.
    if @rows < @page_size
        exec {{ n.capture_check.sql }};
{%- endif %}

    -- At the head: move what has been committed to the outbox, then read again.
    if @rows < @page_size
        and exists (
            select 1 from {{ n.outbox.sql }} with (readcommittedlock, readpast)
            where shard_id = @shard_id)
    begin
        {{ changefeed._sqlserver_sql_move_outbox(c, 8) }}
        delete from @page;
        {{ changefeed._sqlserver_sql_read_page(c, 8) }}
    end;
{%- endif %}

    -- A full page ends at a transaction boundary: an incomplete last block is left for the
    -- next page, unless it is the whole page, in which case it is completed.
    if @rows = @page_size
    begin
        select @last = max(ulid) from @page;
        set @low = convert(bigint, substring(@last, 9, 8)) & convert(bigint, {{ c.align_mask }});
        set @block_first = convert(binary(16), substring(@last, 1, 8) + convert(binary(8), @low));
        set @block_last = convert(binary(16), substring(@last, 1, 8) + convert(binary(8), @low + convert(bigint, {{ c.block_minus_1 }})));
        if exists (
            select 1 from {{ n.feed.sql }}
            where shard_id = @shard_id and ulid > @last and ulid <= @block_last and ulid <= @safe_point)
        begin
            if exists (select 1 from @page where ulid < @block_first)
                delete from @page where ulid >= @block_first;
            else
                insert into @page (ulid, {{ keys }})
                select f.ulid, f.{{ c.key_names | join(', f.') }}
                from {{ n.feed.sql }} as f
                where f.shard_id = @shard_id and f.ulid > @last and f.ulid <= @block_last and f.ulid <= @safe_point;
        end;
    end;

    -- Checked after the page was read, not before: retention commits its horizon with its
    -- delete, so a run that removed events above @after before or while this page was
    -- read has its horizon visible here (under locking READ COMMITTED and under RCSI
    -- alike), and the call fails instead of returning the page without them (C5).
    {{ changefeed._sqlserver_sql_retention_check(c, 4) }}

    -- #read holds one page, as in mssql-changefeed, whose read_feed emptied it first:
    -- code that reads #read after each call must not see the previous page again.
    if object_id(N'tempdb..#read') is not null
    begin
        delete from #read;
        insert into #read (ulid, {{ keys }})
        select ulid, {{ keys }} from @page;
    end
    else
        select ulid, {{ keys }} from @page order by ulid;
end
{%- endmacro %}


{#- T-SQL fragment: @safe_point := the safe point of shard @shard_id (16 zero bytes
    before its first block), in statements of its own (see _sqlserver_sql_safe_point_query).
    The caller declares @heads (_sqlserver_sql_safe_point_table). -#}
{% macro _sqlserver_sql_shard_safe_point(c, depth=0) -%}
{%- set p = ' ' * depth -%}
set @safe_point = null;
{{ p }}{{ changefeed._sqlserver_sql_safe_point_heads(c, depth) }}
{{ p }}select @safe_point = sp.safe_point
{{ p }}from (
{{ p }}    {{ changefeed._sqlserver_sql_safe_point_query(c, depth + 4) }}
{{ p }}) as sp
{{ p }}where sp.shard_id = @shard_id;
{{ p }}set @safe_point = isnull(@safe_point, {{ c.zero16 }});
{%- endmacro %}


{#-
  T-SQL fragment: fill @page with at most @page_size events of shard @shard_id after
  @after, up to the safe point, which is read first, in statements of its own (protocol
  S4). The caller declares @heads (_sqlserver_sql_safe_point_table).
-#}
{% macro _sqlserver_sql_read_page(c, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set n = c.n -%}
{{ changefeed._sqlserver_sql_shard_safe_point(c, depth) }}
{{ p }}insert into @page (ulid, {{ c.key_names | join(', ') }})
{{ p }}select top (@page_size) f.ulid, f.{{ c.key_names | join(', f.') }}
{{ p }}from {{ n.feed.sql }} as f
{{ p }}where f.shard_id = @shard_id and f.ulid > @after and f.ulid <= @safe_point
{{ p }}order by f.ulid;
{{ p }}set @rows = @@rowcount;
{%- endmacro %}


{#-
  [safe_point:<feed>] (protocol section 6): one row per shard, or for @shard_id only.
-#}
{% macro _sqlserver_routine_safe_point(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.safe_point.sql }}
    @shard_id int = null
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 6)
    set nocount on;
    set transaction isolation level read committed;
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}
    {{ changefeed._sqlserver_sql_safe_point_heads(c, 4) }}
    select
        sp.shard_id,
        sp.safe_point,
        sp.head,
        sp.pending,
        sp.generation,
        sp.oldest_pending_session_id,
        sp.oldest_pending_write_id,
        sp.oldest_pending_started_at
    from (
        {{ changefeed._sqlserver_sql_safe_point_query(c, 8) }}
    ) as sp
    order by sp.shard_id;
end
{%- endmacro %}


{#-
  T-SQL fragments of the safe point (protocol section 6), one row per shard:
  shard_id, generation, head, safe_point, pending (sessions of any generation), and the
  oldest pending session (for tombstone). safe_point = least(head, the ULID just below the
  first pending block).

  Two statements, the state first: `_sqlserver_sql_safe_point_heads` copies the heads into
  @heads (declared by `_sqlserver_sql_safe_point_table`), then `_sqlserver_sql_safe_point_query`
  reads the pending sessions in a later statement. A lock call commits a block's state
  advance and its pending session together, so a session read that starts after the head
  was read sees the session of every block at or below that head (pending, committed or
  abandoned). One statement would not do: under locking READ COMMITTED it may scan the
  sessions before it reads the state, and then miss the pending session of a block that its
  head already covers. Callers read their page in a later statement again, which sees at
  least everything these saw. Both read @shard_id (null: every shard).
-#}
{% macro _sqlserver_sql_safe_point_table(c) -%}
declare @heads table (shard_id int not null primary key, generation int not null, head binary(16) not null);
{%- endmacro %}


{#- The heads of one shard, or of all for @shard_id null, in two statements rather than
    `where @shard_id is null or shard_id = @shard_id`: one cached plan for that predicate
    scans every shard's state row, and under locking READ COMMITTED a reader of one shard
    would wait for a lock call or mover of any other (review #26). -#}
{% macro _sqlserver_sql_safe_point_heads(c, depth=0) -%}
{%- set p = ' ' * depth -%}
delete from @heads;
{{ p }}if @shard_id is null
{{ p }}    insert into @heads (shard_id, generation, head)
{{ p }}    select shard_id, generation, head
{{ p }}    from {{ c.n.state.sql }};
{{ p }}else
{{ p }}    insert into @heads (shard_id, generation, head)
{{ p }}    select shard_id, generation, head
{{ p }}    from {{ c.n.state.sql }}
{{ p }}    where shard_id = @shard_id;
{%- endmacro %}


{% macro _sqlserver_sql_safe_point_query(c, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set n = c.n -%}
select
{{ p }}    s.shard_id,
{{ p }}    s.generation,
{{ p }}    s.head,
{{ p }}    case
{{ p }}        when p.first_pending is null or s.head < p.first_pending then s.head
{{ p }}        when p.first_pending = {{ c.zero16 }} then {{ c.zero16 }}
{{ p }}        when substring(p.first_pending, 9, 8) = 0x0000000000000000
{{ p }}            then convert(binary(16), convert(binary(8), convert(bigint, substring(p.first_pending, 1, 8)) - 1) + 0xFFFFFFFFFFFFFFFF)
{{ p }}        when substring(p.first_pending, 9, 8) = 0x8000000000000000
{{ p }}            then convert(binary(16), substring(p.first_pending, 1, 8) + 0x7FFFFFFFFFFFFFFF)
{{ p }}        else convert(binary(16), substring(p.first_pending, 1, 8) + convert(binary(8), convert(bigint, substring(p.first_pending, 9, 8)) - 1))
{{ p }}    end as safe_point,
{{ p }}    p.pending,
{{ p }}    o.session_id as oldest_pending_session_id,
{{ p }}    o.write_id as oldest_pending_write_id,
{{ p }}    o.started_at as oldest_pending_started_at
{{ p }}from @heads as s
{{ p }}outer apply (
{{ p }}    select count(*) as pending, min(w.first_ulid) as first_pending
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0
{{ p }}) as p
{{ p }}outer apply (
{{ p }}    select top (1) w.session_id, w.write_id, w.started_at
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0
{{ p }}    order by w.started_at
{{ p }}) as o
{%- endmacro %}


{#-
  [shards:<feed>] (protocol section 9): the feed's shards, in order: those with a state row
  and, in outbox mode, those with unmoved outbox rows. The reader role may execute it but
  may not read the state or the outbox, and a reader that is not told its shards (the Spark
  source without its `shards` option) must find them all. The outbox's shards are found by
  a skip scan, one seek per shard on its primary key (shard_id, order_sequence): SQL Server
  has none of its own, and `select shard_id from outbox` reads every unmoved row.
-#}
{% macro _sqlserver_routine_shards(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.shards.sql }}
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 9)
    set nocount on;
    set transaction isolation level read committed;
{%- if c.mode == 'outbox' %}
    declare @shards table (shard_id int not null primary key);
    declare @shard int, @next int;
    insert into @shards (shard_id)
    select shard_id from {{ n.state.sql }};
    -- readpast: an outbox row still locked belongs to a transaction that has not committed
    -- (or to a mover publishing it, whose shard then has a state row); waiting for it could
    -- take a whole application transaction (readcommittedlock: readpast needs locking reads
    -- under RCSI).
    select top (1) @shard = shard_id
    from {{ n.outbox.sql }} with (readcommittedlock, readpast)
    order by shard_id;
    while @shard is not null
    begin
        if not exists (select 1 from @shards where shard_id = @shard)
            insert into @shards (shard_id) values (@shard);
        set @next = null;
        select top (1) @next = shard_id
        from {{ n.outbox.sql }} with (readcommittedlock, readpast)
        where shard_id > @shard
        order by shard_id;
        set @shard = @next;
    end;
    select shard_id from @shards order by shard_id;
{%- else %}
    select st.shard_id
    from {{ n.state.sql }} as st
    order by shard_id;
{%- endif %}
end
{%- endmacro %}


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
            begin
                insert into {{ n.incident.sql }} (
                    shard_id, generation, detected_at, reason, holder_session_id, holder_write_id,
                    detected_by_session_id, waited_ms)
                values (
                    @shard_id, @g, sysutcdatetime(), N'tombstone', @session_id, @write_id, @@spid,
                    datediff(millisecond, @started_at, sysutcdatetime()));
                {{ changefeed._sqlserver_sql_incident_trim(c, 16) }}
            end;
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
{{ p }}        {{ changefeed._sqlserver_sql_incident_trim(c, depth + 8) }}
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


{#- T-SQL, after an incident of generation @g was recorded for shard @shard_id: keep the
    incidents of the shard's newest c.incident_keep generations (1,000) and delete the
    older ones. Each incident burns one generation, so this keeps the newest 1,000
    incidents; the delete is one range seek on the table's key (shard_id, generation). -#}
{% macro _sqlserver_sql_incident_trim(c, depth=0) -%}
{%- set p = ' ' * depth -%}
delete from {{ c.n.incident.sql }}
{{ p }}where shard_id = @shard_id and generation <= @g - {{ c.incident_keep }};
{%- endmacro %}


{#- T-SQL: refuse a ULID argument (`param`, declared wider than binary(16), which would
    pad a short value with zero bytes or cut a long one without an error) that is NULL or
    not 16 bytes, with 51065 naming the accepted form; then copy it into `target`, a
    binary(16) variable, which compares with the ULID columns without a conversion. -#}
{% macro _sqlserver_sql_require_ulid(c, routine, param, target, depth=0) -%}
{%- set p = ' ' * depth -%}
if {{ param }} is null or datalength({{ param }}) <> 16
{{ p }}    throw 51065, {{ changefeed._sqlserver_literal('changefeed: ' ~ routine.sql ~ ' needs ' ~ param
    ~ ', a ULID of 16 bytes (binary(16); 0x00000000000000000000000000000000 for the beginning), not NULL nor another length') }}, 1;
{{ p }}set {{ target }} = convert(binary(16), {{ param }});
{%- endmacro %}


{#- -- The read barrier (protocol section 7). -#}


{#-
  [barrier_acquire:<feed>] (protocol section 7), called after your commit: the position
  and, in outbox mode, a sequence value at or above the order_sequence of every outbox row
  committed before the call. The position is the shard's highest ULID in the feed table
  (one backward step of its primary key; 16 zero bytes if none), which covers every event
  committed before the call. Not the head: that also covers blocks of writes still in
  flight, and one of them dying would hold the barrier closed until it is reaped.
-#}
{% macro _sqlserver_routine_barrier_acquire(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.barrier_acquire.sql }}
    @shard_id int,
    @position binary(16) = null output,
    @outbox_sequence bigint = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 7)
    set nocount on;
    set transaction isolation level read committed;
    set @position = null;
    -- readpast: rows of writes still in flight are not committed before the call, and
    -- waiting for them would hold this call for a whole application transaction where
    -- reads lock (readcommittedlock: readpast needs locking reads under RCSI).
    select top (1) @position = ulid
    from {{ n.feed.sql }} with (readcommittedlock, readpast)
    where shard_id = @shard_id
    order by ulid desc;
    set @position = isnull(@position, {{ c.zero16 }});
{%- if c.mode == 'outbox' %}
    set @outbox_sequence = next value for {{ n.sequence.sql }};
{%- else %}
    set @outbox_sequence = null;
{%- endif %}
    select @position as position, @outbox_sequence as outbox_sequence;
end
{%- endmacro %}


{#-
  [barrier_check:<feed>] (protocol section 7): released when the safe point has reached
  the barrier's position and (outbox mode) no outbox row of the shard at or below its
  sequence value is left. The outbox is checked under the mover lock in shared mode, so a
  mover half-way through its transaction is waited for, not skipped; only rows of
  uncommitted writers are skipped, and those committed after the barrier was acquired.
-#}
{% macro _sqlserver_routine_barrier_check(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.barrier_check.sql }}
    @shard_id int,
    @position varbinary(max),  -- checked: 16 bytes (51065)
    @outbox_sequence bigint = null,
    @released bit = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 7)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;
    declare @safe_point binary(16), @at binary(16){% if c.mode == 'outbox' %}, @rc int, @name nvarchar(255), @msg nvarchar(2048){% endif %};

    if @shard_id is null or @position is null
        throw 51045, N'changefeed: barrier_check needs @shard_id and @position (from barrier_acquire)', 1;
    {{ changefeed._sqlserver_sql_require_ulid(c, n.barrier_check, '@position', '@at', 4) }}
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}
    {{ changefeed._sqlserver_sql_safe_point_heads(c, 4) }}
    select @safe_point = sp.safe_point
    from (
        {{ changefeed._sqlserver_sql_safe_point_query(c, 8) }}
    ) as sp
    where sp.shard_id = @shard_id;
    set @released = case when isnull(@safe_point, {{ c.zero16 }}) >= @at then 1 else 0 end;
{%- if c.mode == 'outbox' %}
    if @released = 1 and @outbox_sequence is not null
    begin
        -- Transaction-owned, in a transaction of its own: an interrupted call (a client
        -- timeout) is rolled back by xact_abort and so gives the lock back, where a
        -- session-owned lock would stay with the (pooled) connection and hold every mover
        -- of the shard off. Released explicitly too, for a caller inside a transaction.
        set @name = concat({{ c.lock_prefix_lit }}, @shard_id, N'/mover');
        begin transaction;
        exec @rc = sp_getapplock
            @Resource = @name, @LockMode = N'Shared', @LockOwner = N'Transaction',
            @LockTimeout = 30000, @DbPrincipal = N'public';
        if @rc < 0
        begin
            commit;
            set @msg = concat(N'changefeed: barrier_check could not take the mover lock of ', {{ c.feed_lit }}, N' shard ', @shard_id, N' (sp_getapplock returned ', @rc, N')');
            throw 51046, @msg, 1;
        end;
        if exists (
            select 1 from {{ n.outbox.sql }} with (readcommittedlock, readpast)
            where shard_id = @shard_id and order_sequence <= @outbox_sequence)
            set @released = 0;
        exec sp_releaseapplock @Resource = @name, @LockOwner = N'Transaction', @DbPrincipal = N'public';
        commit;
    end;
{%- endif %}
    select @released as released;
end
{%- endmacro %}
