{#-
  [read_feed:<feed>] (protocol section 8): one page of shard @shard_id after @cursor, up
  to the safe point, ending at a transaction boundary. In outbox mode it first moves the
  outbox when the page is not full (the reader is at the head).
  The page is returned as a result set (ulid, <keys>), or, for code written for
  mssql-changefeed, inserted into the caller's temporary table #read if one exists.
-#}
{% macro _sqlserver_sql_read_feed(c) -%}
{%- set n = c.n -%}
{%- set keys = c.key_names | join(', ') -%}
create or alter procedure {{ n.read_feed.sql }}
    @shard_id int,
    @cursor binary(16) = {{ c.zero16 }},
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
    set @cursor = isnull(@cursor, {{ c.zero16 }});
{%- if c.mode == 'outbox' %}
    if @@trancount > 0
        throw 51020, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.read_feed.sql ~ ' moves the outbox in a transaction of its own; call it outside any transaction') }}, 1;
{%- endif %}

    {{ changefeed._sqlserver_sql_read_page(c, 4) }}
{%- if c.mode == 'outbox' %}

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
        set @block_last = convert(binary(16), substring(@last, 1, 8) + convert(binary(8), @low + {{ c.block_minus_1 }}));
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

    if object_id(N'tempdb..#read') is not null
        insert into #read (ulid, {{ keys }})
        select ulid, {{ keys }} from @page;
    else
        select ulid, {{ keys }} from @page order by ulid;
end
{%- endmacro %}
