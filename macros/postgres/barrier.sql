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
select coalesce((select f.ulid from {{ q['feed'] }} as f
                   where f.shard_id = $1 order by f.ulid desc limit 1),
                 pg_catalog.decode('00000000000000000000000000000000', 'hex')) as "position",
       {% if ctx['mode'] == 'outbox' %}(select s.last_value from {{ q['sequence'] }} as s){% else %}null::bigint{% endif %} as outbox_sequence
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_acquire'] ~ '(p_shard_id integer)
returns table ("position" bytea, outbox_sequence bigint)
language sql volatile
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
select (select sp.safe_point from {{ q['safe_point'] }}($1) as sp) >= $2
{%- if ctx['mode'] == 'outbox' %}
   and not exists (select 1 from {{ q['outbox'] }} as o
                    where o.shard_id = $1 and o.order_sequence <= $3)
{%- endif %}
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_check'] ~ '(p_shard_id integer, p_position bytea, p_outbox_sequence bigint default null)
returns boolean
language sql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
