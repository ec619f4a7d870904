-- Golden: the key_columns SQL of render case 'outbox_trigger' (tests/sqlserver_matrix.py),
-- reviewed by hand. Regenerate (docs/testing.md):
-- CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py
select
    c.name as column_name,
    case
        when t.is_assembly_type = 1 or t.is_user_defined = 0 then t.name
        else b.name
    end as type_name,
    c.max_length,
    c.[precision],
    c.[scale],
    c.collation_name,
    c.is_nullable,
    k.key_ordinal
from sys.columns as c
inner join sys.types as t on t.user_type_id = c.user_type_id
left join sys.types as b on b.user_type_id = c.system_type_id
left join (
    select ic.column_id, ic.key_ordinal
    from sys.indexes as i
    inner join sys.index_columns as ic on ic.object_id = i.object_id and ic.index_id = i.index_id
    where i.object_id = object_id(N'[shop].[order_lines]') and i.is_primary_key = 1
) as k on k.column_id = c.column_id
where c.object_id = object_id(N'[shop].[order_lines]')
order by c.column_id
