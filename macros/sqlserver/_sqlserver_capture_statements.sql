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
