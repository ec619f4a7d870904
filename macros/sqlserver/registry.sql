{#-
  The objects all feeds of one changefeed schema share: the schema and the registry
  `[changefeed].[feeds]` (protocol section 9). Idempotent statements, run under the setup lock.
-#}
{% macro _sqlserver_registry_statements(c) %}
  {%- set feeds = c.schema_sql ~ '.[feeds]' -%}
  {#- Owned by dbo, not by whichever user deploys: the capture trigger (owned by the source
      schema's owner, usually dbo) reaches the outbox by ownership chaining, which holds
      only while both have one owner. -#}
  {%- set schema_ddl = 'create schema ' ~ c.schema_sql ~ ' authorization [dbo]' -%}
  {%- set registry_ddl -%}
create table {{ feeds }} (
    feed_id nvarchar(300) not null,
    source_database nvarchar(128) null,
    source_schema nvarchar(128) not null,
    source_table nvarchar(128) not null,
    source_relation nvarchar(max) not null,
    mode varchar(10) not null,
    key_signature nvarchar(max) not null,
    keys nvarchar(max) not null,
    options nvarchar(max) not null,
    names nvarchar(max) not null,
    protocol_version int not null,
    created_at datetime2(3) not null,
    updated_at datetime2(3) not null,
    constraint [pk:feeds] primary key (feed_id)
)
  {%- endset -%}
  {#- The last statement widens source_relation of registries created as nvarchar(400):
      two bracketed 128-character names with every `]` doubled, or a three-part name, are
      longer. -#}
  {{ return([
      'if schema_id(' ~ c.schema_lit ~ ') is null\n    ' ~ changefeed._sqlserver_exec(schema_ddl),
      'if object_id(' ~ changefeed._sqlserver_literal(feeds) ~ ', N\'U\') is null\n    '
          ~ changefeed._sqlserver_exec(registry_ddl),
      'if col_length(' ~ changefeed._sqlserver_literal(feeds) ~ ', N\'source_relation\') <> -1\n    '
          ~ changefeed._sqlserver_exec('alter table ' ~ feeds ~ ' alter column source_relation nvarchar(max) not null'),
  ]) }}
{% endmacro %}


{#-
  T-SQL: refuse a feed id that the registry holds for another table. The id joins schema
  and table with a dot, so [my.schema].[t] and [my].[schema.t] get the same id and the
  same object names; without this check setup of the second would find the first's row
  and report `unchanged`, and teardown would drop the first's feed. Compared with the
  database's collation, as SQL Server compares the names themselves. Safe before the
  registry exists (setup creates it in the same batch; teardown may find none).
-#}
{% macro _sqlserver_sql_same_source(c) %}
  {%- set feeds = c.schema_sql ~ '.[feeds]' -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set sql -%}
declare @other_source nvarchar(2048);
if object_id({{ lit(feeds) }}, N'U') is not null
    select @other_source = quotename(source_schema) + N'.' + quotename(source_table)
    from {{ feeds }}
    where feed_id = {{ c.feed_lit }}
        and (source_schema <> {{ lit(c.spec['source_schema']) }} or source_table <> {{ lit(c.spec['source_table']) }});
if @other_source is not null
begin
    set @other_source = concat(
        N'changefeed: the feed id ', {{ c.feed_lit }}, N' belongs to the table ', @other_source, N', not to ',
        {{ c.source_lit }}, N'; two tables whose schema and table names join to the same id cannot both have a feed: rename one of them');
    throw 51060, @other_source, 1;
end;
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}


{#- The feed's registry row for the dbt operations (apply_retention, request_snapshot):
    {names, keys, options}, each parsed from its JSON, or none when the feed (or the
    registry) does not exist. -#}
{% macro _sqlserver_registry_row(c) %}
  {%- set found = run_query(changefeed._sqlserver_sql_registry_row(c)) -%}
  {%- set row = found.rows[0] if found is not none and found.rows | length > 0 else none -%}
  {%- if row is none or row['names'] is none -%}
    {{ return(none) }}
  {%- endif -%}
  {{ return({'names': fromjson(row['names']), 'keys': fromjson(row['keys']),
             'options': fromjson(row['options'])}) }}
{% endmacro %}


{#- T-SQL: the registry row's names, keys and options as one row, nulls when there is none.
    The registry may not exist: its query runs through sp_executesql only when it does. -#}
{% macro _sqlserver_sql_registry_row(c) -%}
{%- set feeds = c.schema_sql ~ '.[feeds]' -%}
{%- set lit = changefeed._sqlserver_literal -%}
declare @names nvarchar(max), @keys nvarchar(max), @options nvarchar(max);
if object_id({{ lit(feeds) }}, N'U') is not null
    exec sp_executesql
        {{ lit('select @names = names, @keys = keys, @options = options from ' ~ feeds ~ ' where feed_id = @feed_id') }},
        N'@feed_id nvarchar(300), @names nvarchar(max) output, @keys nvarchar(max) output, @options nvarchar(max) output',
        @feed_id = {{ c.feed_lit }}, @names = @names output, @keys = @keys output, @options = @options output;
select @names as names, @keys as keys, @options as options;
{%- endmacro %}


{#-
  A feed's names as its registry row stores them: under the keys of the adapters' one
  vocabulary, except the objects SQL Server's registry has always stored under keys of
  its own (writer, reader, pk_<table>, ix_outbox_txid, ck_time_hint). Setup compares a
  registered feed's names with its own byte for byte (a difference is error 51053), so
  these keys keep a feed set up by an earlier version the same feed.
-#}
{% macro _sqlserver_registry_names(names) %}
  {%- set stored_as = {
      'writer_role': 'writer', 'reader_role': 'reader',
      'state_pk': 'pk_state', 'feed_pk': 'pk_feed', 'outbox_pk': 'pk_outbox', 'session_pk': 'pk_session',
      'incident_pk': 'pk_incident', 'retention_pk': 'pk_retention', 'consumer_pk': 'pk_consumer',
      'snapshot_pk': 'pk_snapshot', 'outbox_txid': 'ix_outbox_txid', 'outbox_hint': 'ck_time_hint',
  } -%}
  {%- set stored = {} -%}
  {%- for key, name in names.items() -%}
    {%- do stored.update({stored_as.get(key, key): name}) -%}
  {%- endfor -%}
  {{ return(stored) }}
{% endmacro %}
