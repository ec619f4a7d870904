{#- barrier_acquire:<feed>(shard_id) -> (position, outbox_sequence): protocol section 7.
    position is the shard's head in this statement's snapshot; outbox_sequence (outbox
    mode; null in blocking mode) the feed sequence's current value, at or above the
    order_sequence of every outbox row committed before the call. -#}
{% macro _postgres_routine_barrier_acquire(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
select sp.head as "position",
       {% if ctx['mode'] == 'outbox' %}(select s.last_value from {{ q['sequence'] }} as s){% else %}null::bigint{% endif %} as outbox_sequence
  from {{ q['safe_point'] }}($1) as sp
  {%- endset -%}
  {{ return('create or replace function ' ~ q['barrier_acquire'] ~ '(p_shard_id integer)
returns table ("position" bytea, outbox_sequence bigint)
language sql volatile
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
