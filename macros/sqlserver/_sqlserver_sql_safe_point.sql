{#-
  [safe_point:<feed>] (protocol section 6): one row per shard, or for @shard_id only.
-#}
{% macro _sqlserver_sql_safe_point(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.safe_point.sql }}
    @shard_id int = null
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 6)
    set nocount on;
    set transaction isolation level read committed;
    {{ changefeed._sqlserver_sql_safe_point_table(c) }}
    {{ changefeed._sqlserver_sql_safe_point_heads(c, 4) }}
    select
        sp.shard_id,
        sp.safe_point,
        sp.head,
        sp.pending,
        sp.generation,
        sp.oldest_pending_session_id,
        sp.oldest_pending_write_id,
        sp.oldest_pending_started_at
    from (
        {{ changefeed._sqlserver_sql_safe_point_query(c, 8) }}
    ) as sp
    order by sp.shard_id;
end
{%- endmacro %}
