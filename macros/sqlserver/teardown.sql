{#- sqlserver__teardown_feed: the sqlserver implementation of changefeed.teardown_feed (macros/teardown_feed.sql). -#}
{% macro sqlserver__teardown_feed(relation) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {{ return(changefeed._sqlserver_teardown_feed(changefeed._feed_identity(changefeed._feed_relation(relation)))) }}
{% endmacro %}

{#- Drops one feed's objects, roles and history on SQL Server (see _sqlserver_teardown_batch). -#}
{% macro _sqlserver_teardown_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'teardown', changefeed._sqlserver_teardown_batch(spec))) }}
{% endmacro %}


{#-
  Drops every object of a feed (both modes' objects, whichever exist), empties and drops
  its roles, and deletes its registry row: one batch, one transaction, under the setup
  lock. Destructive: the feed's history and undelivered outbox rows are gone. A feed
  that does not exist is not an error. Result: action = dropped | absent.
-#}
{% macro _sqlserver_teardown_batch(spec) %}
  {%- set any_mode = {} -%}
  {%- do any_mode.update(spec) -%}
  {%- do any_mode.update({'mode': none, 'keys': none}) -%}
  {%- set c = changefeed._sqlserver_feed_context(any_mode) -%}
  {%- set n = c.n -%}
  {%- set feeds = c.schema_sql ~ '.[feeds]' -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set out = [] -%}
  {%- set title -%}
-- changefeed teardown of feed {{ tojson(c.feed_id) }} in schema {{ tojson(spec['schema']) }}: drops its objects and history.
-- One batch, one transaction.
  {%- endset -%}
  {%- do out.append(changefeed._sqlserver_batch_header(
      c, title, 'declare @rc int, @found int = 0, @member nvarchar(128), @sql nvarchar(max);')) -%}
  {%- do out.append(changefeed._sqlserver_sql_same_source(c)) -%}
  {#- The DDL trigger first (it would create the capture trigger), then the capture trigger:
      it writes into the outbox. -#}
  {%- do out.append('if exists (select 1 from sys.triggers as t where t.parent_class = 0 and t.name = '
      ~ n.recapture.lit ~ ')\nbegin\n    set @found = 1;\n    drop trigger ' ~ n.recapture.sql ~ ' on database;\nend;') -%}
  {%- set drops = [('trigger', n.capture), ('procedure', n.capture_check)] -%}
  {#- The procedures of _sqlserver_routine_kinds(none) in the order this batch has always
      had, which keeps it as reviewed in tests/golden (test_sqlserver_render checks that it
      drops every routine setup creates); ulid, a function, follows, and the guard trigger
      goes with its table. -#}
  {%- for key in ['read_feed', 'safe_point', 'tombstone', 'barrier_acquire', 'barrier_check', 'shards',
                  'lock', 'update_state', 'release', 'feed_write_lock', 'retain', 'save_cursor',
                  'forget_consumer', 'snapshot_begin', 'snapshot_finish'] -%}
    {%- do drops.append(('procedure', n[key])) -%}
  {%- endfor -%}
  {%- do drops.append(('function', n.ulid)) -%}
  {%- do drops.append(('type', n.read_type)) -%}
  {%- for key in changefeed._feed_table_kinds() -%}
    {%- do drops.append(('table', n[key])) -%}
  {%- endfor -%}
  {%- do drops.append(('sequence', n.sequence)) -%}
  {%- for kind, entry in drops -%}
    {%- set probe = 'type_id(' ~ entry.lit ~ ')' if kind == 'type' else 'object_id(' ~ entry.lit ~ ')' -%}
    {%- do out.append('if ' ~ probe ~ ' is not null\nbegin\n    set @found = 1;\n    drop ' ~ kind ~ ' ' ~ entry.sql ~ ';\nend;') -%}
  {%- endfor -%}
  {%- for role in [n.writer_role, n.reader_role] -%}
    {%- set drop_role -%}
if database_principal_id({{ role.lit }}) is not null
begin
    set @found = 1;
    while 1 = 1
    begin
        set @member = null;
        select top (1) @member = user_name(m.member_principal_id)
        from sys.database_role_members as m
        where m.role_principal_id = database_principal_id({{ role.lit }});
        if @member is null
            break;
        set @sql = concat({{ lit('alter role ' ~ role.sql ~ ' drop member ') }}, quotename(@member), N';');
        exec sp_executesql @sql;
    end;
    drop role {{ role.sql }};
end;
    {%- endset -%}
    {%- do out.append(drop_role) -%}
  {%- endfor -%}
  {%- set footer -%}
if object_id({{ lit(feeds) }}, N'U') is not null
begin
    delete from {{ feeds }} where feed_id = {{ c.feed_lit }};
    if @@rowcount > 0
        set @found = 1;
end;
commit;
select case when @found = 1 then N'dropped' else N'absent' end as action;
  {%- endset -%}
  {%- do out.append(footer) -%}
  {{ return(out | join('\n\n') ~ '\n') }}
{% endmacro %}
