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
