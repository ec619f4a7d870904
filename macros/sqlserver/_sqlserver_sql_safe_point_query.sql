{#-
  T-SQL fragment: a query with one row per shard (protocol section 6):
  shard_id, generation, head, safe_point, pending (sessions of the current generation),
  and the oldest pending session (for tombstone). safe_point = least(head, the ULID just
  below the first pending block); both terms come from committed rows, and callers read
  their page in a later statement, which sees at least everything this one saw.
-#}
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
{{ p }}from {{ n.state.sql }} as s
{{ p }}outer apply (
{{ p }}    select count(*) as pending, min(w.first_ulid) as first_pending
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0 and w.generation = s.generation
{{ p }}) as p
{{ p }}outer apply (
{{ p }}    select top (1) w.session_id, w.write_id, w.started_at
{{ p }}    from {{ n.session.sql }} as w
{{ p }}    where w.shard_id = s.shard_id and w.state = 0 and w.generation = s.generation
{{ p }}    order by w.started_at
{{ p }}) as o
{%- endmacro %}
