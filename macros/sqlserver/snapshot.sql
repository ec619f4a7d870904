{#-
  Snapshots (protocol section 12) on SQL Server: the request table snapshot:<feed>, the
  procedures snapshot_begin (reserve one empty block in a shard and record the request) and
  snapshot_finish (mark it done), as PostgreSQL's functions of the same names
  (macros/postgres/snapshot.sql). Setup creates them; upgrade_feed, or setup_feed run again,
  gives them to a feed set up by a package without snapshots (the registry's names say
  which: context.sql). Landings execute the requests.
-#}


{#- The kinds snapshots added (keys of the context's names): a feed registered without
    them is set up by an older package, and setup or upgrade adds them (context.sql,
    setup.sql). -#}
{% macro _sqlserver_snapshot_kinds() %}
  {{ return(['snapshot', 'snapshot_pk', 'snapshot_begin', 'snapshot_finish']) }}
{% endmacro %}


{#- The request table, created when missing (a new feed, or one set up without snapshots),
    and the reader's right to read it (protocol 12.1). Through sp_executesql, so that the
    grant resolves the table created earlier in the same batch. -#}
{% macro _sqlserver_snapshot_tables_statements(c) %}
  {%- set n = c.n -%}
  {%- set ddl -%}
create table {{ n.snapshot.sql }} (
    snapshot_id bigint not null,
    shard_id int not null,
    first_ulid binary(16) not null,
    last_ulid binary(16) not null,
    key_from nvarchar(max) null,
    key_to nvarchar(max) null,
    requested_at datetime2(7) not null,
    finished_at datetime2(7) null,
    rows_landed bigint null,
    constraint {{ n.snapshot_pk.sql }} primary key (snapshot_id)
)
  {%- endset -%}
  {{ return([
      'if object_id(' ~ n.snapshot.lit ~ ', N\'U\') is null\n    ' ~ changefeed._sqlserver_exec(ddl),
      changefeed._sqlserver_exec('grant select on object::' ~ n.snapshot.sql ~ ' to ' ~ n.reader_role.sql),
  ]) }}
{% endmacro %}


{#-
  [snapshot_begin:<feed>] (protocol 12.1): reserve the next block of @shard_id, empty, and
  record the request; returns (snapshot_id, first_ulid) as a one-row result set and as
  output parameters. The block is allocated under the state row's update lock only, the
  lock every allocation takes (section 3, A1): lock calls allocate under it in their short
  transaction (writer.sql), movers under it in theirs (outbox.sql), so the block lies above
  every block allocated before and below every one allocated after. No shard lock and no
  mover lock: a block without rows needs neither, and the reader role, which calls this,
  must not wait for a writer. No session row either: the block is committed at once, empty.
  A transaction of its own, short, like a lock call's, so it refuses to run inside the
  caller's (51071): there it would hold the state row, and so every writer of the shard,
  until the caller's commit. A lock call waiting for a stalled holder sees the state row
  move and counts it as progress (protocol 4.2): it waits once more before it burns.
-#}
{% macro _sqlserver_routine_snapshot_begin(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.snapshot_begin.sql }}
    @shard_id int,
    @key_from nvarchar(max) = null,
    @key_to nvarchar(max) = null,
    @snapshot_id bigint = null output,
    @first_ulid binary(16) = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md 12.1)
    set nocount on;
    set xact_abort on;
    set transaction isolation level read committed;

    declare
        @msg nvarchar(2048),
        @bad bit,
        @probe nvarchar(4000),
        @t datetime2(3),
        @st_time datetime2(3),
        @st_high binary(8),
        @st_low bigint,
        @b_time datetime2(3),
        @b_high binary(8),
        @b_start bigint;

    if @@trancount > 0
        throw 51071, {{ changefeed._sqlserver_literal('changefeed: ' ~ n.snapshot_begin.sql ~ ' reserves its block in a short transaction of its own; call it outside any transaction') }}, 1;
    {{ changefeed._sqlserver_sql_refuse_implicit_transactions(51071, n.snapshot_begin, 4) }}
    if @shard_id is null
        throw 51070, {{ changefeed._sqlserver_literal('changefeed: snapshot_begin on ' ~ c.feed_id ~ ': @shard_id must not be NULL') }}, 1;
    {{ changefeed._sqlserver_sql_snapshot_key_check(c, '@key_from', 4) }}
    {{ changefeed._sqlserver_sql_snapshot_key_check(c, '@key_to', 4) }}

    begin try
        begin transaction;
        -- The state row, locked to the commit (created if missing), as a mover locks it.
        {{ changefeed._sqlserver_sql_state_for_update(c, 8) }}
        -- The block of a transaction with the time hint "now" (protocol section 3), and
        -- the state row moved past it: the next allocation lands above it.
        set @t = sysutcdatetime();
        {{ changefeed._sqlserver_sql_block(c, 8) }}
        update {{ n.state.sql }}
        set time = @b_time, ulid_high = @b_high, ulid_low = @b_start + convert(bigint, {{ c.block }})
        where shard_id = @shard_id;
        set @snapshot_id = next value for {{ n.sequence.sql }};
        set @first_ulid = convert(binary(16), @b_high + convert(binary(8), @b_start));
        insert into {{ n.snapshot.sql }} (
            snapshot_id, shard_id, first_ulid, last_ulid, key_from, key_to, requested_at,
            finished_at, rows_landed)
        values (
            @snapshot_id, @shard_id, @first_ulid,
            convert(binary(16), @b_high + convert(binary(8), @b_start + convert(bigint, {{ c.block_minus_1 }}))),
            @key_from, @key_to, sysutcdatetime(), null, null);
        commit;
    end try
    begin catch
        if @@trancount > 0
            rollback;
        throw;
    end catch;
    select @snapshot_id as snapshot_id, @first_ulid as first_ulid;
end
{%- endmacro %}


{#-
  T-SQL: refuse a key bound (`param`) that is not NULL or a JSON array of exactly one
  scalar (string, number or boolean; not null) per key column (protocol 12.1; PostgreSQL
  CF007), with 51070 naming the accepted form. No OPENJSON: it needs database
  compatibility level 130, which a database upgraded from an older server may not have;
  ISJSON and JSON_VALUE work at every level. ISJSON without a type is true for an object
  or an array only; the first character that is not JSON whitespace tells which. Every
  element below the key's length must be a non-null scalar (lax JSON_VALUE: NULL for a
  missing element, a null, an object or an array, or a string longer than 4000
  characters), and the element after them must not exist: a strict path to a missing
  element raises 13608, any other outcome means there is one more element. Each test in an
  IF of its own, since T-SQL does not promise to stop at the first false operand and
  JSON_VALUE raises 13609 on text that is not JSON. Then each value must convert to its
  key column's type (TRY_CONVERT, as the landing's chunk reads cast it, datetime and
  smalldatetime through datetime2): a request the landing could not compare the key with
  could never run.
-#}
{% macro _sqlserver_sql_snapshot_key_check(c, param, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set keys = c.spec['keys'] | map(attribute='name') | list -%}
{%- set count = keys | length -%}
{%- set form = 'a JSON array of ' ~ count ~ ' value' ~ ('s' if count != 1 else '') ~ ' (the key ' ~ keys | join(', ') ~ ')' -%}
if {{ param }} is not null
{{ p }}begin
{{ p }}    set @bad = 1;
{{ p }}    if isjson({{ param }}) = 1
{{ p }}        and substring({{ param }}, patindex(N'%[^ ' + nchar(9) + nchar(10) + nchar(13) + N']%', {{ param }}), 1) = N'['
{{ p }}    begin
{{ p }}        if {% for i in range(count) %}json_value({{ param }}, N'$[{{ i }}]') is not null{% if not loop.last %}
{{ p }}            and {% endif %}{% endfor %}
{{ p }}        begin
{{ p }}            begin try
{{ p }}                set @probe = json_value({{ param }}, N'strict $[{{ count }}]');
{{ p }}            end try
{{ p }}            begin catch
{{ p }}                if error_number() = 13608
{{ p }}                    set @bad = 0;
{{ p }}            end catch;
{{ p }}        end;
{{ p }}    end;
{{ p }}    if @bad = 1
{{ p }}    begin
{{ p }}        set @msg = concat(
{{ p }}            {{ changefeed._sqlserver_literal('changefeed: snapshot_begin on ' ~ c.feed_id ~ ': ' ~ param ~ ' must be NULL or ' ~ form ~ ', got ') }},
{{ p }}            {{ param }});
{{ p }}        throw 51070, @msg, 1;
{{ p }}    end;
{%- for key in c.spec['keys'] %}
{%- set data_type = key['data_type'] | string | trim %}
{%- set value = "json_value(" ~ param ~ ", N'$[" ~ loop.index0 ~ "]')" %}
{%- if data_type.split('(')[0] | lower in ['datetime', 'smalldatetime'] %}
{%- set value = 'try_convert(datetime2, ' ~ value ~ ')' %}
{%- endif %}
{{ p }}    if try_convert({{ data_type }}, {{ value }}) is null
{{ p }}    begin
{{ p }}        set @msg = concat(
{{ p }}            {{ changefeed._sqlserver_literal('changefeed: snapshot_begin on ' ~ c.feed_id ~ ': ' ~ param ~ "'s value ") }},
{{ p }}            json_value({{ param }}, N'$[{{ loop.index0 }}]'),
{{ p }}            {{ changefeed._sqlserver_literal(' does not fit the key column ' ~ key['name'] ~ ' (' ~ data_type ~ '), so the landing could not compare the key with it; got ') }},
{{ p }}            {{ param }});
{{ p }}        throw 51070, @msg, 1;
{{ p }}    end;
{%- endfor %}
{{ p }}end;
{%- endmacro %}


{#-
  [snapshot_finish:<feed>] (protocol 12.1): mark request @snapshot_id finished with the
  number of rows its landing wrote. @finished (and the one-row result) is 1 when this call
  finished it, 0 when it was finished before, by this or another landing. A NULL argument,
  a negative count or an unknown request fails with 51070.
-#}
{% macro _sqlserver_routine_snapshot_finish(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.snapshot_finish.sql }}
    @snapshot_id bigint,
    @rows_landed bigint,
    @finished bit = null output
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md 12.1)
    set nocount on;
    set xact_abort on;
    declare @msg nvarchar(2048);
    if @snapshot_id is null or @rows_landed is null or @rows_landed < 0
        throw 51070, {{ changefeed._sqlserver_literal('changefeed: snapshot_finish on ' ~ c.feed_id ~ ' needs @snapshot_id and @rows_landed (a count, 0 or more)') }}, 1;
    update {{ n.snapshot.sql }}
    set finished_at = sysutcdatetime(), rows_landed = @rows_landed
    where snapshot_id = @snapshot_id and finished_at is null;
    set @finished = case when @@rowcount = 1 then 1 else 0 end;
    if @finished = 0 and not exists (select 1 from {{ n.snapshot.sql }} where snapshot_id = @snapshot_id)
    begin
        set @msg = concat(
            {{ changefeed._sqlserver_literal('changefeed: snapshot_finish on ' ~ c.feed_id ~ ': no snapshot request ') }},
            @snapshot_id, {{ changefeed._sqlserver_literal(' (see the table ' ~ n.snapshot.sql ~ ')') }});
        throw 51070, @msg, 1;
    end;
    select @finished as finished;
end
{%- endmacro %}


{#-
  The dbt operation (macros/request_snapshot.sql), as postgres__request_snapshot: checks the
  arguments against the registry's key (_feed_snapshot_arguments), refuses a feed set up
  without snapshots and a shard other than the feed's only one when the writers' shard rule
  is unknown (no capture: trigger shard expression, protocol 12.3 "Shards"), then runs
  snapshot_begin, which commits by itself: dbt-sqlserver's connection is in autocommit, and
  a plain exec (not INSERT ... EXEC) opens no transaction around it. Returns {snapshot_id,
  shard_id, first_ulid (32 hex digits)}, the first ULID read back as hex (dbt's result
  tables hold text, not bytes).
-#}
{% macro sqlserver__request_snapshot(relation, shard, key_from, key_to) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_identity(changefeed._feed_relation(relation)) -%}
  {%- set c = changefeed._sqlserver_feed_context(spec) -%}
  {%- set row = changefeed._sqlserver_registry_row(c) -%}
  {%- if row is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is not set up, so there is nothing to snapshot;"
        ~ " check the relation, or set it up with `dbt run-operation changefeed.setup_feed`") }}
  {%- endif -%}
  {%- set bounds = changefeed._feed_snapshot_arguments(shard, key_from, key_to, row['keys'] | map(attribute='name') | list) -%}
  {%- set names = row['names'] -%}
  {%- if 'snapshot_begin' not in names -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a package without snapshots;"
        ~ " run `dbt run-operation changefeed.upgrade_feed` with its config first (it adds the snapshot"
        ~ " table and procedures and keeps the data)") }}
  {%- endif -%}
  {%- set options = row['options'] or {} -%}
  {%- if not (options.get('capture') == 'trigger' and options.get('shard')) -%}
    {%- set listed = run_query('exec ' ~ c.schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(names['shards'])) -%}
    {%- set others = [] -%}
    {%- for found in listed.rows if found[0] | int != shard -%}
      {%- do others.append(found[0] | int) -%}
    {%- endfor -%}
    {%- if others -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: the feed " ~ spec['feed_id'] ~ " has events in shard(s) " ~ others | join(', ')
          ~ " besides " ~ shard ~ ", and its writers choose shards by a rule the database does not know"
          ~ " (no capture: trigger with a shard expression), so a snapshot of shard " ~ shard
          ~ " would give other shards' keys a second history; snapshots support single-shard feeds and"
          ~ " capture: trigger feeds with a shard expression") }}
    {%- endif -%}
  {%- endif -%}
  {%- set begun = run_query(changefeed._sqlserver_sql_request_snapshot(c, names, shard, bounds)) -%}
  {%- set snapshot_id = begun.rows[0][0] | int -%}
  {%- set hex = run_query(changefeed._sqlserver_sql_snapshot_first_ulid(c, names, snapshot_id)) -%}
  {%- set result = {'snapshot_id': snapshot_id, 'shard_id': shard, 'first_ulid': hex.rows[0][0]} -%}
  {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " shard " ~ shard ~ ": snapshot " ~ snapshot_id
             ~ " requested (block " ~ result['first_ulid'] ~ "); the next landing of the feed executes it", info=true) -%}
  {{ return(result) }}
{% endmacro %}


{#- T-SQL of request_snapshot: snapshot_begin with the checked arguments (`bounds`: the two
    key bounds as JSON text, or none). Its result set is the procedure's own. -#}
{% macro _sqlserver_sql_request_snapshot(c, names, shard, bounds) -%}
{%- set lit = changefeed._sqlserver_literal -%}
exec {{ c.schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(names['snapshot_begin']) }}
    @shard_id = {{ shard }},
    @key_from = {{ lit(bounds[0]) if bounds[0] is not none else 'null' }},
    @key_to = {{ lit(bounds[1]) if bounds[1] is not none else 'null' }};
{%- endmacro %}


{#- T-SQL of request_snapshot: the request's first ULID as 32 lowercase hex digits. -#}
{% macro _sqlserver_sql_snapshot_first_ulid(c, names, snapshot_id) -%}
select lower(convert(varchar(32), first_ulid, 2)) as first_ulid
from {{ c.schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(names['snapshot']) }}
where snapshot_id = {{ snapshot_id | int }};
{%- endmacro %}
