{#-
  The objects all feeds of one changefeed schema share: the schema and the registry
  `[changefeed].[feeds]` (protocol section 9). Idempotent statements, run under the setup lock.
-#}
{% macro _sqlserver_registry_statements(c) %}
  {%- set feeds = c.schema_sql ~ '.[feeds]' -%}
  {%- set schema_ddl = 'create schema ' ~ c.schema_sql -%}
  {%- set registry_ddl -%}
create table {{ feeds }} (
    feed_id nvarchar(300) not null,
    source_database nvarchar(128) null,
    source_schema nvarchar(128) not null,
    source_table nvarchar(128) not null,
    source_relation nvarchar(400) not null,
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
  {{ return([
      'if schema_id(' ~ c.schema_lit ~ ') is null\n    ' ~ changefeed._sqlserver_exec(schema_ddl),
      'if object_id(' ~ changefeed._sqlserver_literal(feeds) ~ ', N\'U\') is null\n    '
          ~ changefeed._sqlserver_exec(registry_ddl),
  ]) }}
{% endmacro %}
