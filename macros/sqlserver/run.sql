{#-
  Runs one generated batch on the SQL Server connection and logs its one-row result
  (action), e.g. "changefeed: shop.orders (outbox): created".
-#}
{% macro _sqlserver_run_batch(spec, operation, batch) %}
  {%- set result = run_query(batch) -%}
  {%- set action = result.columns[0].values()[0] if result is not none and result.rows | length > 0 else 'done' -%}
  {{ log('changefeed: ' ~ operation ~ ' of ' ~ spec['feed_id'] ~ (' (' ~ spec['mode'] ~ ' mode)' if spec.get('mode') else '') ~ ': ' ~ action, info=true) }}
  {{ return(action) }}
{% endmacro %}


{#-
  Wraps one T-SQL statement that must start a batch (create schema/procedure/function/
  type, and for uniformity every other DDL) in `exec sp_executesql N'...'`, so that a
  whole setup runs as ONE batch in ONE transaction.
-#}
{% macro _sqlserver_exec(sql) %}
  {{ return('exec sp_executesql ' ~ changefeed._sqlserver_literal(sql | trim) ~ ';') }}
{% endmacro %}


{#-
  The start of every setup, upgrade and teardown batch: its title comment, the session
  options, the batch's own variables (`declarations`), the transaction, and the setup
  lock that serialises all changefeed setups of one changefeed schema (protocol D1).
  xact_abort makes any error roll the whole batch back.
-#}
{% macro _sqlserver_batch_header(c, title, declarations) %}
  {%- set header -%}
{{ title }}
set nocount on;
set xact_abort on;
{{ declarations }}
begin transaction;
exec @rc = sp_getapplock
    @Resource = {{ c.setup_lock_lit }}, @LockMode = N'Exclusive', @LockOwner = N'Transaction',
    @LockTimeout = 60000, @DbPrincipal = N'public';
if @rc < 0
    throw 51050, N'changefeed: timed out waiting for another changefeed setup in this database (setup lock)', 1;
  {%- endset -%}
  {{ return(header) }}
{% endmacro %}
