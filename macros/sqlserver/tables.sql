{#-
  The feed's tables, sequence, table type and roles (protocol section 9), created once by
  setup and never re-created by upgrade. Each CREATE runs through sp_executesql.
-#}
{% macro _sqlserver_tables_statements(c) %}
  {%- set n = c.n -%}
  {%- set keys = c.key_decls | join(',\n    ') -%}
  {%- set statements = [] -%}

  {#- state: one row per shard. time is NULL until the shard's first block; head is the
      highest ULID any committed transaction of the shard may have used (16 zero bytes
      before the first). -#}
  {%- set ddl -%}
create table {{ n.state.sql }} (
    shard_id int not null,
    time datetime2(3) null,
    ulid_high binary(8) not null,
    ulid_low bigint not null,
    generation int not null,
    head as convert(binary(16), case
        when time is null then {{ c.zero16 }}
        else ulid_high + convert(binary(8), ulid_low - 1)
    end),
    constraint {{ n.state_pk.sql }} primary key (shard_id)
)
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {%- set ddl -%}
create table {{ n.feed.sql }} (
    shard_id int not null,
    ulid binary(16) not null,
    {{ keys }},
    constraint {{ n.feed_pk.sql }} primary key (shard_id, ulid)
) with (data_compression = page)
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {#- session: one row per (shard, connection); state 0 pending, 1 committed, 2 abandoned
      (protocol section 6). The block and the state it was computed from are kept here,
      so update_state needs nothing but the write id from session_context. -#}
  {%- set ddl -%}
create table {{ n.session.sql }} (
    shard_id int not null,
    session_id int not null,
    write_id uniqueidentifier not null,
    state tinyint not null,
    generation int not null,
    time datetime2(3) not null,
    ulid_high binary(8) not null,
    block_start bigint not null,
    first_ulid binary(16) not null,
    expected_time datetime2(3) null,
    expected_ulid_high binary(8) not null,
    expected_ulid_low bigint not null,
    started_at datetime2(7) not null,
    ended_at datetime2(7) null,
    end_reason nvarchar(20) null,
    constraint {{ n.session_pk.sql }} primary key (shard_id, session_id),
    constraint {{ n.ck_session_state.sql }} check (state in (0, 1, 2))
)
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {#- incident: one row per burned lock generation (protocol 4.2 and section 6). -#}
  {%- set ddl -%}
create table {{ n.incident.sql }} (
    shard_id int not null,
    generation int not null,
    detected_at datetime2(3) not null,
    reason nvarchar(20) not null,
    holder_session_id int null,
    holder_write_id uniqueidentifier null,
    detected_by_session_id int not null,
    waited_ms int null,
    constraint {{ n.incident_pk.sql }} primary key (shard_id, generation)
)
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {%- set ddl -%}
create sequence {{ n.sequence.sql }} as bigint start with 1 increment by 1 cache 1000
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {%- if c.mode == 'outbox' -%}
    {#- outbox: writers insert their keys here, in their own transactions; txid and
        order_sequence come from defaults (protocol section 5). -#}
    {%- set ddl -%}
create table {{ n.outbox.sql }} (
    shard_id int not null,
    order_sequence bigint not null
        constraint {{ n.df_order_sequence.sql }} default (next value for {{ n.sequence.sql }}),
    txid bigint not null
        constraint {{ n.df_txid.sql }} default (current_transaction_id()),
    time_hint datetime2(3) not null
        constraint {{ n.df_time_hint.sql }} default (sysutcdatetime()),
    {{ keys }},
    constraint {{ n.outbox_pk.sql }} primary key (shard_id, order_sequence),
    constraint {{ n.outbox_hint.sql }} check (time_hint >= '1970-01-01')
)
    {%- endset -%}
    {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}
    {%- set ddl -%}
create index {{ n.outbox_txid.sql }} on {{ n.outbox.sql }} (shard_id, txid)
    {%- endset -%}
    {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}
  {%- endif -%}
  {%- do statements.extend(changefeed._sqlserver_lock_escalation_statements(c)) -%}
  {%- do statements.extend(changefeed._sqlserver_sequential_key_statements(c)) -%}

  {#- The page type of read_feed; also usable by callers: declare @page <type>. -#}
  {%- set ddl -%}
create type {{ n.read_type.sql }} as table (
    ulid binary(16) not null primary key,
    {{ keys }}
)
  {%- endset -%}
  {%- do statements.append(changefeed._sqlserver_exec(ddl)) -%}

  {%- for role in [n.writer_role, n.reader_role] -%}
    {%- do statements.append('if database_principal_id(' ~ role.lit ~ ') is null\n    '
        ~ changefeed._sqlserver_exec('create role ' ~ role.sql)) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}


{#-
  No lock escalation on the tables every writer and reader touches. A statement that takes
  ~5000 row locks on one of them (a big write, a bulk update seen by the capture trigger, a
  large move) would otherwise lock the whole table until its commit: writers of every
  other shard would wait, and READPAST, which skips locked rows but not a locked table,
  would make the mover, the barrier and the shard list wait too. Setup runs these for a new
  feed, upgrade_feed for an existing one (idempotent).
-#}
{% macro _sqlserver_lock_escalation_statements(c) %}
  {%- set statements = [] -%}
  {%- for kind in ['state', 'feed', 'outbox', 'session'] if kind in c.n -%}
    {%- do statements.append(changefeed._sqlserver_exec(
        'alter table ' ~ c.n[kind].sql ~ ' set (lock_escalation = disable)')) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}


{#-
  The outbox's primary key (shard_id, order_sequence) grows at its end, so many writers of
  one shard insert into its last page: optimize_for_sequential_key throttles them there
  instead of letting them convoy on the page latch. It exists from SQL Server 2019
  (ProductMajorVersion 15) and on Azure SQL Database and Managed Instance (EngineEdition
  5 and 8, which report 12 as their version); older servers keep the plain index and
  never compile the option, nor the catalogue column that says whether it is set (both are
  in a string that only runs where they exist). Setup runs it for a new feed, upgrade_feed
  for an existing one; the index is altered only when the option is off, since the ALTER
  locks the outbox against its writers.
-#}
{% macro _sqlserver_sequential_key_statements(c) %}
  {%- if 'outbox' not in c.n -%}
    {{ return([]) }}
  {%- endif -%}
  {%- set ddl -%}
if exists (
    select 1 from sys.indexes
    where object_id = object_id({{ c.n.outbox.lit }}) and is_primary_key = 1 and optimize_for_sequential_key = 0)
    alter index {{ c.n.outbox_pk.sql }} on {{ c.n.outbox.sql }} set (optimize_for_sequential_key = on)
  {%- endset -%}
  {{ return(['if convert(int, serverproperty(\'ProductMajorVersion\')) >= 15 or convert(int, serverproperty(\'EngineEdition\')) in (5, 8)\n    '
      ~ changefeed._sqlserver_exec(ddl)]) }}
{% endmacro %}
