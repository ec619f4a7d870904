-- Golden: the upgrade SQL of render case 'outbox_trigger' (tests/support/sqlserver_matrix.py),
-- reviewed by hand. Regenerate (docs/testing.md):
-- CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py
-- changefeed upgrade of feed "shop.order_lines" (outbox mode) in schema "changefeed", protocol 3.
-- Re-creates procedures and functions; tables and data are kept. One batch, one transaction.
set nocount on;
set xact_abort on;
-- What the objects created below keep (QUOTED_IDENTIFIER and ANSI_NULLS for procedures
-- and triggers, ANSI_PADDING for columns) and what computed columns need, whatever the
-- client's defaults (DB-Library and sqlcmd without -I have QUOTED_IDENTIFIER off).
set ansi_nulls, ansi_padding, ansi_warnings, arithabort, concat_null_yields_null, quoted_identifier on;
set numeric_roundabort off;
declare @rc int, @msg nvarchar(2048), @mode varchar(10), @keys nvarchar(max), @version int, @options nvarchar(max);
begin transaction;
exec @rc = sp_getapplock
    @Resource = N'changefeed/setup', @LockMode = N'Exclusive', @LockOwner = N'Transaction',
    @LockTimeout = 60000, @DbPrincipal = N'public';
if @rc < 0
    throw 51050, N'changefeed: timed out waiting for another changefeed setup in this database (setup lock)', 1;
declare @other_source nvarchar(2048);
if object_id(N'[changefeed].[feeds]', N'U') is not null
    select @other_source = quotename(source_schema) + N'.' + quotename(source_table)
    from [changefeed].[feeds]
    where feed_id = N'shop.order_lines'
        and (source_schema <> N'shop' or source_table <> N'order_lines');
if @other_source is not null
begin
    set @other_source = concat(
        N'changefeed: the feed id ', N'shop.order_lines', N' belongs to the table ', @other_source, N', not to ',
        N'[shop].[order_lines]', N'; two tables whose schema and table names join to the same id cannot both have a feed: rename one of them');
    throw 51060, @other_source, 1;
end;
if object_id(N'[changefeed].[feeds]', N'U') is null
    throw 51056, N'changefeed: feed shop.order_lines is not set up (no registry [changefeed].[feeds]); run changefeed.setup_feed first', 1;
select @mode = mode, @keys = key_signature, @version = protocol_version, @options = options
from [changefeed].[feeds]
where feed_id = N'shop.order_lines';
if @@rowcount = 0
    throw 51056, N'changefeed: feed shop.order_lines is not set up; run changefeed.setup_feed first', 1;
if @mode <> N'outbox'
begin
    set @msg = concat(
        N'changefeed: the feed ', N'shop.order_lines', N' is set up in ', @mode,
        N' mode, but upgrade_feed was given outbox; upgrade_feed cannot change the mode: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51051, @msg, 1;
end;
if convert(varbinary(max), @keys) <> convert(varbinary(max), N'[["tenant_id", "uniqueidentifier", null, false], ["sku", "nvarchar(40)", "Latin1_General_CI_AS", false], ["version", "bigint", null, false]]')
begin
    set @msg = concat(
        N'changefeed: the key of feed ', N'shop.order_lines', N' changed: set up with ', @keys, N', now ',
        N'[["tenant_id", "uniqueidentifier", null, false], ["sku", "nvarchar(40)", "Latin1_General_CI_AS", false], ["version", "bigint", null, false]]', N'; upgrade_feed cannot change the key: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51052, @msg, 1;
end;
-- An upgrade run with the old arguments must not switch capture off: capture and shard
-- change through setup_feed only.
if isnull(json_value(@options, N'$.capture'), N'none') <> N'trigger'
    or isnull(json_value(@options, N'$.shard'), N'') <> N'abs(checksum([sku])) % 4'
begin
    set @msg = concat(
        N'changefeed: the feed ', N'shop.order_lines', N' is registered with capture ', isnull(json_value(@options, N'$.capture'), N'none'),
        N' (shard ', isnull(json_value(@options, N'$.shard'), N'-'), N'), but upgrade_feed was given capture trigger',
        N'; upgrade_feed keeps them: pass the registered capture and shard, or change them with changefeed.setup_feed');
    throw 51059, @msg, 1;
end;

exec sp_executesql N'alter table [changefeed].[state:shop.order_lines] set (lock_escalation = disable)';

exec sp_executesql N'alter table [changefeed].[feed:shop.order_lines] set (lock_escalation = disable)';

exec sp_executesql N'alter table [changefeed].[outbox:shop.order_lines] set (lock_escalation = disable)';

exec sp_executesql N'alter table [changefeed].[session:shop.order_lines] set (lock_escalation = disable)';

-- @@as in setup.sql@@ if convert(int, serverproperty('ProductMajorVersion')) >= 15 or convert(int, serverproperty('EngineEdition')) in (5, 8)

-- @@as in setup.sql@@ if object_id(N'[shop].[order_lines]', N'U') is null

-- @@as in setup.sql@@ if object_id(N'[changefeed].[retention:shop.order_lines]', N'U') is null

-- @@as in setup.sql@@ if object_id(N'[changefeed].[consumer:shop.order_lines]', N'U') is null

exec sp_executesql N'grant select on object::[changefeed].[retention:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant select on object::[changefeed].[consumer:shop.order_lines] to [changefeed_reader:shop.order_lines]';

-- @@as in setup.sql@@ if object_id(N'[changefeed].[snapshot:shop.order_lines]', N'U') is null

exec sp_executesql N'grant select on object::[changefeed].[snapshot:shop.order_lines] to [changefeed_reader:shop.order_lines]';

-- @@as in setup.sql@@ exec sp_executesql N'declare @ddl nvarchar(max) = replace(N''create or alter procedure [changefeed].[capture_check:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[feed_write_lock:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[read_feed:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[safe_point:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[tombstone:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[barrier_acquire:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[barrier_check:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[shards:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[retain:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[save_cursor:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[forget_consumer:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[snapshot_begin:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[snapshot_finish:shop.order_lines]

-- @@as in setup.sql@@ exec sp_executesql N'declare @key_columns nvarchar(max), @ddl nvarchar(max);

-- @@as in setup.sql@@ exec sp_executesql N'declare @key_columns nvarchar(max), @ddl nvarchar(max), @recapture nvarchar(max);

exec sp_executesql N'grant insert on object::[changefeed].[outbox:shop.order_lines] to [changefeed_writer:shop.order_lines]';

exec sp_executesql N'grant update on object::[changefeed].[sequence:shop.order_lines] to [changefeed_writer:shop.order_lines]';

exec sp_executesql N'grant select on object::[changefeed].[feed:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[read_feed:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[safe_point:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[tombstone:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[barrier_acquire:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[barrier_check:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[shards:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[save_cursor:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[forget_consumer:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[snapshot_begin:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[snapshot_finish:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on type::[changefeed].[type:read:shop.order_lines] to [changefeed_reader:shop.order_lines]';

exec sp_executesql N'grant execute on object::[changefeed].[capture_check:shop.order_lines] to [changefeed_reader:shop.order_lines]';

update [changefeed].[feeds]
set options = N'{"block_bits": 36, "capture": "trigger", "lock_probe_ms": 20, "shard": "abs(checksum([sku])) % 4", "stall_timeout_ms": 5000}', names = N'{"barrier_acquire": "barrier_acquire:shop.order_lines", "barrier_check": "barrier_check:shop.order_lines", "ck_session_state": "ck:session.state:shop.order_lines", "ck_time_hint": "ck:outbox.time_hint:shop.order_lines", "consumer": "consumer:shop.order_lines", "df_order_sequence": "df:outbox.order_sequence:shop.order_lines", "df_time_hint": "df:outbox.time_hint:shop.order_lines", "df_txid": "df:outbox.txid:shop.order_lines", "feed": "feed:shop.order_lines", "feed_write_lock": "feed_write_lock:shop.order_lines", "forget_consumer": "forget_consumer:shop.order_lines", "incident": "incident:shop.order_lines", "ix_outbox_txid": "ix:outbox.txid:shop.order_lines", "outbox": "outbox:shop.order_lines", "pk_consumer": "pk:consumer:shop.order_lines", "pk_feed": "pk:feed:shop.order_lines", "pk_incident": "pk:incident:shop.order_lines", "pk_outbox": "pk:outbox:shop.order_lines", "pk_retention": "pk:retention:shop.order_lines", "pk_session": "pk:session:shop.order_lines", "pk_snapshot": "pk:snapshot:shop.order_lines", "pk_state": "pk:state:shop.order_lines", "read_feed": "read_feed:shop.order_lines", "read_type": "type:read:shop.order_lines", "reader": "changefeed_reader:shop.order_lines", "retain": "retain:shop.order_lines", "retention": "retention:shop.order_lines", "safe_point": "safe_point:shop.order_lines", "save_cursor": "save_cursor:shop.order_lines", "sequence": "sequence:shop.order_lines", "session": "session:shop.order_lines", "shards": "shards:shop.order_lines", "snapshot": "snapshot:shop.order_lines", "snapshot_begin": "snapshot_begin:shop.order_lines", "snapshot_finish": "snapshot_finish:shop.order_lines", "state": "state:shop.order_lines", "tombstone": "tombstone:shop.order_lines", "writer": "changefeed_writer:shop.order_lines"}', protocol_version = 3,
    updated_at = sysutcdatetime()
where feed_id = N'shop.order_lines';
commit;
select N'upgraded' as action;
