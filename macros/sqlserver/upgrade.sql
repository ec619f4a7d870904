{#- sqlserver__upgrade_feed: the sqlserver implementation of changefeed.upgrade_feed (macros/upgrade_feed.sql). -#}
{% macro sqlserver__upgrade_feed(relation, options) %}
  {%- if not execute -%}{{ return(none) }}{%- endif -%}
  {%- set spec = changefeed._feed_build_spec(relation, options, changefeed._sqlserver_key_columns) -%}
  {{ return(changefeed._sqlserver_upgrade_feed(spec)) }}
{% endmacro %}

{#- Re-creates one feed's procedures and functions on SQL Server (see _sqlserver_upgrade_batch). -#}
{% macro _sqlserver_upgrade_feed(spec) %}
  {{ return(changefeed._sqlserver_run_batch(spec, 'upgrade', changefeed._sqlserver_upgrade_batch(spec))) }}
{% endmacro %}


{#-
  Re-creates a registered feed's procedures and functions (`create or alter`) and its
  grants, disables lock escalation on its hot tables, and creates the retention and
  snapshot tables of a feed set up without them, in one batch and one transaction
  under the setup lock; tables, data and roles are kept. The mode, key, capture and shard
  must match the registry. Result: action = upgraded.
-#}
{% macro _sqlserver_upgrade_batch(spec) %}
  {%- set c = changefeed._sqlserver_feed_context(spec) -%}
  {%- set feeds = c.schema_sql ~ '.[feeds]' -%}
  {%- set lit = changefeed._sqlserver_literal -%}
  {%- set out = [] -%}
  {%- set title -%}
-- changefeed upgrade of feed {{ tojson(c.feed_id) }} ({{ c.mode }} mode) in schema {{ tojson(spec['schema']) }}, protocol {{ c.version }}.
-- Re-creates procedures and functions; tables and data are kept. One batch, one transaction.
  {%- endset -%}
  {%- set start = changefeed._sqlserver_batch_header(
      c, title, 'declare @rc int, @msg nvarchar(2048), @mode varchar(10), @keys nvarchar(max), @version int, @options nvarchar(max);') -%}
  {%- set checks -%}
if object_id({{ lit(feeds) }}, N'U') is null
    throw 51056, {{ lit('changefeed: feed ' ~ c.feed_id ~ ' is not set up (no registry ' ~ feeds ~ '); run changefeed.setup_feed first') }}, 1;
select @mode = mode, @keys = key_signature, @version = protocol_version, @options = options
from {{ feeds }}
where feed_id = {{ c.feed_lit }};
if @@rowcount = 0
    throw 51056, {{ lit('changefeed: feed ' ~ c.feed_id ~ ' is not set up; run changefeed.setup_feed first') }}, 1;
if @mode <> {{ lit(c.mode) }}
begin
    set @msg = concat(
        N'changefeed: the feed ', {{ c.feed_lit }}, N' is set up in ', @mode,
        N' mode, but upgrade_feed was given {{ c.mode }}; upgrade_feed cannot change the mode: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51051, @msg, 1;
end;
if convert(varbinary(max), @keys) <> convert(varbinary(max), {{ lit(c.key_sig_json) }})
begin
    set @msg = concat(
        N'changefeed: the key of feed ', {{ c.feed_lit }}, N' changed: set up with ', @keys, N', now ',
        {{ lit(c.key_sig_json) }}, N'; upgrade_feed cannot change the key: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51052, @msg, 1;
end;
-- An upgrade run with the old arguments must not switch capture off: capture and shard
-- change through setup_feed only.
if isnull(json_value(@options, N'$.capture'), N'none') <> {{ lit(c.capture) }}
    or isnull(json_value(@options, N'$.shard'), N'') <> {{ lit(c.shard or '') }}
begin
    set @msg = concat(
        N'changefeed: the feed ', {{ c.feed_lit }}, N' is registered with capture ', isnull(json_value(@options, N'$.capture'), N'none'),
        N' (shard ', isnull(json_value(@options, N'$.shard'), N'-'), N'), but upgrade_feed was given capture {{ c.capture }}',
        N'; upgrade_feed keeps them: pass the registered capture and shard, or change them with changefeed.setup_feed');
    throw 51059, @msg, 1;
end;
  {%- endset -%}
  {%- do out.append(start ~ '\n' ~ changefeed._sqlserver_sql_same_source(c) ~ '\n' ~ checks) -%}
  {%- set crossing = changefeed._sqlserver_upgrade_pending_writes(c, '@version') -%}
  {%- if crossing -%}
    {%- do out.append(crossing) -%}
  {%- endif -%}
  {#- Feeds set up before lock escalation was disabled (or the sequential-key option set) get it now. -#}
  {%- for statement in changefeed._sqlserver_lock_escalation_statements(c) + changefeed._sqlserver_sequential_key_statements(c) -%}
    {%- do out.append(statement) -%}
  {%- endfor -%}
  {%- for statement in changefeed._sqlserver_capture_check(c) + changefeed._sqlserver_retention_tables_statements(c)
                       + changefeed._sqlserver_snapshot_tables_statements(c)
                       + changefeed._sqlserver_routine_statements(c) + changefeed._sqlserver_grants_statements(c) -%}
    {%- do out.append(statement) -%}
  {%- endfor -%}
  {%- set footer -%}
update {{ feeds }}
set options = {{ lit(c.options_json) }}, names = {{ lit(c.names_json) }}, protocol_version = {{ c.version }},
    updated_at = sysutcdatetime()
where feed_id = {{ c.feed_lit }};
commit;
select N'upgraded' as action;
  {%- endset -%}
  {%- do out.append(footer) -%}
  {{ return(out | join('\n\n') ~ '\n') }}
{% endmacro %}


{#-
  T-SQL run by upgrade (and by setup's `updated` path) before the procedures are
  re-created, when the registered protocol version, in the variable `version`, is older:
  empty when nothing needs doing.

  1 -> 2 (blocking mode): a write whose lock call ran under protocol 1 has not moved the
  state row past its block. Committed by protocol 2's update_state, its events would stay
  above the head and the next writer of the same millisecond would allocate the same block.
  So its pending session is abandoned here: its update_state fails with 51012 (`upgraded`)
  and the client retries under protocol 2. readpast leaves alone a write whose protocol-1
  update_state is committing: that one moves the state row itself. A protocol-1 lock call
  still running when the upgrade commits is not covered (see docs/sqlserver.md).
-#}
{% macro _sqlserver_upgrade_pending_writes(c, version) %}
  {%- if c.mode != 'blocking' -%}
    {{ return('') }}
  {%- endif -%}
  {%- set sql -%}
if {{ version }} < 2
    update w
    set state = 2, ended_at = sysutcdatetime(), end_reason = N'upgraded'
    from {{ c.n.session.sql }} as w with (readcommittedlock, readpast)
    where w.state = 0;
  {%- endset -%}
  {{ return(sql) }}
{% endmacro %}
