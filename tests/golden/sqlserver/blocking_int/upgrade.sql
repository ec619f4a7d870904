-- Golden: the upgrade SQL of render case 'blocking_int' (tests/support/sqlserver_matrix.py),
-- reviewed by hand. Regenerate (docs/testing.md):
-- CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py
-- changefeed upgrade of feed "shop.orders" (blocking mode) in schema "changefeed", protocol 3.
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
    where feed_id = N'shop.orders'
        and (source_schema <> N'shop' or source_table <> N'orders');
if @other_source is not null
begin
    set @other_source = concat(
        N'changefeed: the feed id ', N'shop.orders', N' belongs to the table ', @other_source, N', not to ',
        N'[shop].[orders]', N'; two tables whose schema and table names join to the same id cannot both have a feed: rename one of them');
    throw 51060, @other_source, 1;
end;
if object_id(N'[changefeed].[feeds]', N'U') is null
    throw 51056, N'changefeed: feed shop.orders is not set up (no registry [changefeed].[feeds]); run changefeed.setup_feed first', 1;
select @mode = mode, @keys = key_signature, @version = protocol_version, @options = options
from [changefeed].[feeds]
where feed_id = N'shop.orders';
if @@rowcount = 0
    throw 51056, N'changefeed: feed shop.orders is not set up; run changefeed.setup_feed first', 1;
if @mode <> N'blocking'
begin
    set @msg = concat(
        N'changefeed: the feed ', N'shop.orders', N' is set up in ', @mode,
        N' mode, but upgrade_feed was given blocking; upgrade_feed cannot change the mode: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51051, @msg, 1;
end;
if convert(varbinary(max), @keys) <> convert(varbinary(max), N'[["order_id", "int", null, false]]')
begin
    set @msg = concat(
        N'changefeed: the key of feed ', N'shop.orders', N' changed: set up with ', @keys, N', now ',
        N'[["order_id", "int", null, false]]', N'; upgrade_feed cannot change the key: run changefeed.teardown_feed and then changefeed.setup_feed');
    throw 51052, @msg, 1;
end;
-- An upgrade run with the old arguments must not switch capture off: capture and shard
-- change through setup_feed only.
if isnull(json_value(@options, N'$.capture'), N'none') <> N'none'
    or isnull(json_value(@options, N'$.shard'), N'') <> N''
begin
    set @msg = concat(
        N'changefeed: the feed ', N'shop.orders', N' is registered with capture ', isnull(json_value(@options, N'$.capture'), N'none'),
        N' (shard ', isnull(json_value(@options, N'$.shard'), N'-'), N'), but upgrade_feed was given capture none',
        N'; upgrade_feed keeps them: pass the registered capture and shard, or change them with changefeed.setup_feed');
    throw 51059, @msg, 1;
end;

if @version < 2
    update w
    set state = 2, ended_at = sysutcdatetime(), end_reason = N'upgraded'
    from [changefeed].[session:shop.orders] as w with (readcommittedlock, readpast)
    where w.state = 0;

exec sp_executesql N'alter table [changefeed].[state:shop.orders] set (lock_escalation = disable)';

exec sp_executesql N'alter table [changefeed].[feed:shop.orders] set (lock_escalation = disable)';

exec sp_executesql N'alter table [changefeed].[session:shop.orders] set (lock_escalation = disable)';

-- @@as in setup.sql@@ if object_id(N'[changefeed].[retention:shop.orders]', N'U') is null

-- @@as in setup.sql@@ if object_id(N'[changefeed].[consumer:shop.orders]', N'U') is null

exec sp_executesql N'grant select on object::[changefeed].[retention:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant select on object::[changefeed].[consumer:shop.orders] to [changefeed_reader:shop.orders]';

-- @@as in setup.sql@@ if object_id(N'[changefeed].[snapshot:shop.orders]', N'U') is null

exec sp_executesql N'grant select on object::[changefeed].[snapshot:shop.orders] to [changefeed_reader:shop.orders]';

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[release:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[lock:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[update_state:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter function [changefeed].[ulid:shop.orders](@v bigint)

-- @@as in setup.sql@@ exec sp_executesql N'create or alter trigger [changefeed].[guard:shop.orders] on [changefeed].[feed:shop.orders] after insert

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[read_feed:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[safe_point:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[tombstone:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[barrier_acquire:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[barrier_check:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[shards:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[retain:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[save_cursor:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[forget_consumer:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[snapshot_begin:shop.orders]

-- @@as in setup.sql@@ exec sp_executesql N'create or alter procedure [changefeed].[snapshot_finish:shop.orders]

exec sp_executesql N'grant execute on object::[changefeed].[lock:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[update_state:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[release:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[ulid:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant insert on object::[changefeed].[feed:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant update on object::[changefeed].[sequence:shop.orders] to [changefeed_writer:shop.orders]';

exec sp_executesql N'grant select on object::[changefeed].[feed:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[read_feed:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[safe_point:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[tombstone:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[barrier_acquire:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[barrier_check:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[shards:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[save_cursor:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[forget_consumer:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[snapshot_begin:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on object::[changefeed].[snapshot_finish:shop.orders] to [changefeed_reader:shop.orders]';

exec sp_executesql N'grant execute on type::[changefeed].[type:read:shop.orders] to [changefeed_reader:shop.orders]';

update [changefeed].[feeds]
set options = N'{"block_bits": 36, "lock_probe_ms": 20, "stall_timeout_ms": 5000}', names = N'{"barrier_acquire": "barrier_acquire:shop.orders", "barrier_check": "barrier_check:shop.orders", "ck_session_state": "ck:session.state:shop.orders", "consumer": "consumer:shop.orders", "feed": "feed:shop.orders", "forget_consumer": "forget_consumer:shop.orders", "incident": "incident:shop.orders", "lock": "lock:shop.orders", "pk_consumer": "pk:consumer:shop.orders", "pk_feed": "pk:feed:shop.orders", "pk_incident": "pk:incident:shop.orders", "pk_retention": "pk:retention:shop.orders", "pk_session": "pk:session:shop.orders", "pk_snapshot": "pk:snapshot:shop.orders", "pk_state": "pk:state:shop.orders", "read_feed": "read_feed:shop.orders", "read_type": "type:read:shop.orders", "reader": "changefeed_reader:shop.orders", "release": "release:shop.orders", "retain": "retain:shop.orders", "retention": "retention:shop.orders", "safe_point": "safe_point:shop.orders", "save_cursor": "save_cursor:shop.orders", "sequence": "sequence:shop.orders", "session": "session:shop.orders", "shards": "shards:shop.orders", "snapshot": "snapshot:shop.orders", "snapshot_begin": "snapshot_begin:shop.orders", "snapshot_finish": "snapshot_finish:shop.orders", "state": "state:shop.orders", "tombstone": "tombstone:shop.orders", "ulid": "ulid:shop.orders", "update_state": "update_state:shop.orders", "writer": "changefeed_writer:shop.orders"}', protocol_version = 3,
    updated_at = sysutcdatetime()
where feed_id = N'shop.orders';
commit;
select N'upgraded' as action;
