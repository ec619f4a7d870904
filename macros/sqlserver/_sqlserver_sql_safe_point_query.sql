{#-
  T-SQL fragments of the safe point (protocol section 6), one row per shard:
  shard_id, generation, head, safe_point, pending (sessions of any generation), and the
  oldest pending session (for tombstone). safe_point = least(head, the ULID just below the
  first pending block).

  Two statements, the state first: `_sqlserver_sql_safe_point_heads` copies the heads into
  @heads (declared by `_sqlserver_sql_safe_point_table`), then `_sqlserver_sql_safe_point_query`
  reads the pending sessions in a later statement. A lock call commits a block's state
  advance and its pending session together, so a session read that starts after the head
  was read sees the session of every block at or below that head (pending, committed or
  abandoned). One statement would not do: under locking READ COMMITTED it may scan the
  sessions before it reads the state, and then miss the pending session of a block that its
  head already covers. Callers read their page in a later statement again, which sees at
  least everything these saw. Both read @shard_id (null: every shard).
-#}
{% macro _sqlserver_sql_safe_point_table(c) -%}
declare @heads table (shard_id int not null primary key, generation int not null, head binary(16) not null);
{%- endmacro %}


{% macro _sqlserver_sql_safe_point_heads(c, depth=0) -%}
{%- set p = ' ' * depth -%}
delete from @heads;
{{ p }}insert into @heads (shard_id, generation, head)
{{ p }}select shard_id, generation, head
{{ p }}from {{ c.n.state.sql }}
{{ p }}where @shard_id is null or shard_id = @shard_id;
{%- endmacro %}


{% macro _sqlserver_sql_safe_point_query(c, depth=0) -%}
{%- set p = ' ' * depth -%}
{%- set n = c.n -%}
select
{{ p }}    s.shard_id,
{{ p }}    s.generation,
{{ p }}    s.head,
{{ p }}    case
{{ p }}        when p.first_pending is null or s.head < p.first_pending then s.head
{{ p }}        when p.first_pending = {{ c.zero16 }} then {{ c.zero16 }}
{{ p }}        when substring(p.first_pending, 9, 8) = 0x0000000000000000
{{ p }}            then convert(binary(16), convert(binary(8), convert(bigint, substring(p.first_pending, 1, 8)) - 1) + 0xFFFFFFFFFFFFFFFF)
{{ p }}        when substring(p.first_pending, 9, 8) = 0x8000000000000000
{{ p }}            then convert(binary(16), substring(p.first_pending, 1, 8) + 0x7FFFFFFFFFFFFFFF)
{{ p }}        else convert(binary(16), substring(p.first_pending, 1, 8) + convert(binary(8), convert(bigint, substring(p.first_pending, 9, 8)) - 1))
{{ p }}    end as safe_point,
{{ p }}    p.pending,
{{ p }}    o.session_id as oldest_pending_session_id,
{{ p }}    o.write_id as oldest_pending_write_id,
{{ p }}    o.started_at as oldest_pending_started_at
{{ p }}from @heads as s
{{ p }}outer apply (
{{ p }}    select count(*) as pending, min(w.first_ulid) as first_pending
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0
{{ p }}) as p
{{ p }}outer apply (
{{ p }}    select top (1) w.session_id, w.write_id, w.started_at
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0
{{ p }}    order by w.started_at
{{ p }}) as o
{%- endmacro %}
