-- Golden: the teardown SQL of render case 'blocking_int' (tests/support/sqlserver_matrix.py),
-- reviewed by hand. Regenerate (docs/testing.md):
-- CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py
-- changefeed teardown of feed "shop.orders" in schema "changefeed": drops its objects and history.
-- One batch, one transaction.
set nocount on;
set xact_abort on;
-- What the objects created below keep (QUOTED_IDENTIFIER and ANSI_NULLS for procedures
-- and triggers, ANSI_PADDING for columns) and what computed columns need, whatever the
-- client's defaults (DB-Library and sqlcmd without -I have QUOTED_IDENTIFIER off).
set ansi_nulls, ansi_padding, ansi_warnings, arithabort, concat_null_yields_null, quoted_identifier on;
set numeric_roundabort off;
declare @rc int, @found int = 0, @member nvarchar(128), @sql nvarchar(max);
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

if exists (select 1 from sys.triggers as t where t.parent_class = 0 and t.name = N'recapture:changefeed.shop.orders')
begin
    set @found = 1;
    drop trigger [recapture:changefeed.shop.orders] on database;
end;

if object_id(N'[shop].[capture:changefeed.shop.orders]') is not null
begin
    set @found = 1;
    drop trigger [shop].[capture:changefeed.shop.orders];
end;

if object_id(N'[changefeed].[capture_check:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[capture_check:shop.orders];
end;

if object_id(N'[changefeed].[read_feed:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[read_feed:shop.orders];
end;

if object_id(N'[changefeed].[safe_point:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[safe_point:shop.orders];
end;

if object_id(N'[changefeed].[tombstone:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[tombstone:shop.orders];
end;

if object_id(N'[changefeed].[barrier_acquire:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[barrier_acquire:shop.orders];
end;

if object_id(N'[changefeed].[barrier_check:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[barrier_check:shop.orders];
end;

if object_id(N'[changefeed].[shards:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[shards:shop.orders];
end;

if object_id(N'[changefeed].[lock:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[lock:shop.orders];
end;

if object_id(N'[changefeed].[update_state:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[update_state:shop.orders];
end;

if object_id(N'[changefeed].[release:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[release:shop.orders];
end;

if object_id(N'[changefeed].[feed_write_lock:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[feed_write_lock:shop.orders];
end;

if object_id(N'[changefeed].[retain:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[retain:shop.orders];
end;

if object_id(N'[changefeed].[save_cursor:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[save_cursor:shop.orders];
end;

if object_id(N'[changefeed].[forget_consumer:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[forget_consumer:shop.orders];
end;

if object_id(N'[changefeed].[snapshot_begin:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[snapshot_begin:shop.orders];
end;

if object_id(N'[changefeed].[snapshot_finish:shop.orders]') is not null
begin
    set @found = 1;
    drop procedure [changefeed].[snapshot_finish:shop.orders];
end;

if object_id(N'[changefeed].[ulid:shop.orders]') is not null
begin
    set @found = 1;
    drop function [changefeed].[ulid:shop.orders];
end;

if type_id(N'[changefeed].[type:read:shop.orders]') is not null
begin
    set @found = 1;
    drop type [changefeed].[type:read:shop.orders];
end;

if object_id(N'[changefeed].[outbox:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[outbox:shop.orders];
end;

if object_id(N'[changefeed].[feed:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[feed:shop.orders];
end;

if object_id(N'[changefeed].[session:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[session:shop.orders];
end;

if object_id(N'[changefeed].[incident:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[incident:shop.orders];
end;

if object_id(N'[changefeed].[state:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[state:shop.orders];
end;

if object_id(N'[changefeed].[retention:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[retention:shop.orders];
end;

if object_id(N'[changefeed].[consumer:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[consumer:shop.orders];
end;

if object_id(N'[changefeed].[snapshot:shop.orders]') is not null
begin
    set @found = 1;
    drop table [changefeed].[snapshot:shop.orders];
end;

if object_id(N'[changefeed].[sequence:shop.orders]') is not null
begin
    set @found = 1;
    drop sequence [changefeed].[sequence:shop.orders];
end;

if database_principal_id(N'changefeed_writer:shop.orders') is not null
begin
    set @found = 1;
    while 1 = 1
    begin
        set @member = null;
        select top (1) @member = user_name(m.member_principal_id)
        from sys.database_role_members as m
        where m.role_principal_id = database_principal_id(N'changefeed_writer:shop.orders');
        if @member is null
            break;
        set @sql = concat(N'alter role [changefeed_writer:shop.orders] drop member ', quotename(@member), N';');
        exec sp_executesql @sql;
    end;
    drop role [changefeed_writer:shop.orders];
end;

if database_principal_id(N'changefeed_reader:shop.orders') is not null
begin
    set @found = 1;
    while 1 = 1
    begin
        set @member = null;
        select top (1) @member = user_name(m.member_principal_id)
        from sys.database_role_members as m
        where m.role_principal_id = database_principal_id(N'changefeed_reader:shop.orders');
        if @member is null
            break;
        set @sql = concat(N'alter role [changefeed_reader:shop.orders] drop member ', quotename(@member), N';');
        exec sp_executesql @sql;
    end;
    drop role [changefeed_reader:shop.orders];
end;

if object_id(N'[changefeed].[feeds]', N'U') is not null
begin
    delete from [changefeed].[feeds] where feed_id = N'shop.orders';
    if @@rowcount > 0
        set @found = 1;
end;
commit;
select case when @found = 1 then N'dropped' else N'absent' end as action;
