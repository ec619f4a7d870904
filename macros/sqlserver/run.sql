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
  options (they stay set on the connection afterwards: they are the ODBC, JDBC and .NET
  defaults apart from ARITHABORT), the batch's own variables (`declarations`), the transaction, and the setup
  lock that serialises all changefeed setups of one changefeed schema (protocol D1).
  xact_abort makes any error roll the whole batch back.
-#}
{% macro _sqlserver_batch_header(c, title, declarations) %}
  {%- set header -%}
{{ title }}
set nocount on;
set xact_abort on;
-- What the objects created below keep (QUOTED_IDENTIFIER and ANSI_NULLS for procedures
-- and triggers, ANSI_PADDING for columns) and what computed columns need, whatever the
-- client's defaults (DB-Library and sqlcmd without -I have QUOTED_IDENTIFIER off).
set ansi_nulls, ansi_padding, ansi_warnings, arithabort, concat_null_yields_null, quoted_identifier on;
set numeric_roundabort off;
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


{#-
  T-SQL fragment for a procedure that commits work of its own (lock, release, tombstone,
  the outbox read_feed) and so checks `@@trancount = 0` first: that check cannot see SET
  IMPLICIT_TRANSACTIONS ON (pyodbc's autocommit=False, ODBC SQL_AUTOCOMMIT_OFF, JDBC
  setAutoCommit(false)), under which EXEC opens no transaction but the procedure's first
  read does, so its own commit only nests and its locks and writes wait for the client's
  commit. Refused with the procedure's "outside any transaction" error number.
-#}
{% macro _sqlserver_sql_refuse_implicit_transactions(number, routine, depth=0) -%}
{%- set p = ' ' * depth -%}
if (@@options & 2) = 2
{{ p }}    throw {{ number }}, {{ changefeed._sqlserver_literal('changefeed: ' ~ routine.sql
    ~ ' commits work of its own and cannot run with SET IMPLICIT_TRANSACTIONS ON (autocommit off in the client:'
    ~ ' pyodbc autocommit=False, JDBC setAutoCommit(false)); call it on a connection in autocommit mode, or run'
    ~ ' set implicit_transactions off first') }}, 1;
{%- endmacro %}
