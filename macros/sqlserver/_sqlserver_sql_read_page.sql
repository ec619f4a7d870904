{#-
  T-SQL fragment: fill @page with at most @page_size events of shard @shard_id after
  @cursor, up to the safe point, which is read first, in statements of its own (protocol
  S4). The caller declares @heads (_sqlserver_sql_safe_point_table).
-#}
{% macro _sqlserver_sql_read_page(c, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set n = c.n -%}
set @safe_point = null;
{{ p }}{{ changefeed._sqlserver_sql_safe_point_heads(c, depth) }}
{{ p }}select @safe_point = sp.safe_point
{{ p }}from (
{{ p }}    {{ changefeed._sqlserver_sql_safe_point_query(c, depth + 4) }}
{{ p }}) as sp
{{ p }}where sp.shard_id = @shard_id;
{{ p }}set @safe_point = isnull(@safe_point, {{ c.zero16 }});
{{ p }}insert into @page (ulid, {{ c.key_names | join(', ') }})
{{ p }}select top (@page_size) f.ulid, f.{{ c.key_names | join(', f.') }}
{{ p }}from {{ n.feed.sql }} as f
{{ p }}where f.shard_id = @shard_id and f.ulid > @cursor and f.ulid <= @safe_point
{{ p }}order by f.ulid;
{{ p }}set @rows = @@rowcount;
{%- endmacro %}
