{#- shards:<feed>() -> setof shard_id: the feed's shards, in order: those with a state row
    and, in outbox mode, those with unmoved outbox rows. SECURITY DEFINER, because the
    reader role may not read the state or the outbox, yet a reader that is not told its
    shards (the Spark source without its `shards` option) must find them all. -#}
{% macro _postgres_routine_shards(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
select st.shard_id from {{ q['state'] }} as st
{%- if ctx['mode'] == 'outbox' %}
union
select o.shard_id from {{ q['outbox'] }} as o
{%- endif %}
order by 1
  {%- endset -%}
  {{ return('create or replace function ' ~ q['shards'] ~ '()
returns table (shard_id integer)
language sql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
