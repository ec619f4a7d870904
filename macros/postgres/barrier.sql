{#-
  The read barrier (protocol section 7): barrier_acquire takes a position, barrier_check
  says when the safe point (and, in outbox mode, the mover) has passed it.
-#}


{#- barrier_acquire:<feed>(shard_id) -> (position, outbox_sequence): protocol section 7.
    position is the shard's highest committed ULID in this statement's snapshot (16 zero
    bytes if none), one backward step of the primary key; not the head, which also covers
    blocks of writes still in flight, so that a writer that dies would hold the barrier.
    outbox_sequence (outbox mode; null in blocking mode) is the feed sequence's current
    value, at or above the order_sequence of every outbox row committed before the call. -#}
{% macro _postgres_routine_barrier_acquire(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
{{ changefeed._postgres_sql_require_shard(ctx, 'barrier_acquire') }}
  return query
select coalesce((select f.ulid from {{ q['feed'] }} as f
                   where f.shard_id = $1 order by f.ulid desc limit 1),
                 pg_catalog.decode('00000000000000000000000000000000', 'hex')) as "position",
       {% if ctx['mode'] == 'outbox' %}(select s.last_value from {{ q['sequence'] }} as s){% else %}null::bigint{% endif %} as outbox_sequence;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_acquire'] ~ '(p_shard_id integer)
returns table ("position" bytea, outbox_sequence bigint)
language plpgsql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- barrier_check:<feed>(shard_id, position, outbox_sequence) -> boolean: protocol section 7.
    True when the safe point has reached position and (outbox mode) no outbox row of the
    shard numbered at or below outbox_sequence remains unmoved. -#}
{% macro _postgres_routine_barrier_check(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
begin
  if p_shard_id is null or p_position is null or pg_catalog.octet_length(p_position) <> 16
     {%- if ctx['mode'] == 'outbox' %} or p_outbox_sequence is null{% endif %} then
    raise exception using errcode = 'CF007',
      message = 'changefeed: barrier_check on ' || {{ ctx['lit_feed'] }} || ' needs a shard_id, a position of 16 bytes'
        {%- if ctx['mode'] == 'outbox' %} || ' and an outbox_sequence'{% endif %} || ', as barrier_acquire returned them'
        || ' (got shard_id ' || coalesce(p_shard_id::text, 'null') || ', position of '
        || coalesce(pg_catalog.octet_length(p_position)::text || ' bytes', 'null')
        || ', outbox_sequence ' || coalesce(p_outbox_sequence::text, 'null') || ')';
  end if;
  return (select sp.safe_point from {{ q['safe_point'] }}($1) as sp) >= $2
{%- if ctx['mode'] == 'outbox' %}
   and not exists (select 1 from {{ q['outbox'] }} as o
                    where o.shard_id = $1 and o.order_sequence <= $3)
{%- endif %};
end
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_check'] ~ '(p_shard_id integer, p_position bytea, p_outbox_sequence bigint default null)
returns boolean
language plpgsql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
