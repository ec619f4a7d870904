{#- safe_point:<feed>(shard_id) -> (safe_point, head, pending): protocol section 6, from
    the state row and the session table only (its cost does not grow with the feed).
    head = ulid_high || int8(ulid_low - 1), the last ULID of the last allocated block,
    in signed arithmetic: after a block that ended at -1 the next free start is 0, and
    the head is still that block's last ULID (16 zero bytes for a new shard);
    safe_point = least(head, the ULID below the first ULID of every pending session of
    the shard, of any generation: a burned holder's session is abandoned by the burn, and
    one that is committing keeps its block until it has). One statement, so one
    snapshot. -#}
{% macro _postgres_routine_safe_point(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set body -%}
select least(h.head, p.first_pending) as safe_point, h.head, p.pending
  from (select coalesce(
                 (select st.ulid_high || pg_catalog.int8send(st.ulid_low - 1)
                    from {{ q['state'] }} as st where st.shard_id = $1),
                 pg_catalog.decode('00000000000000000000000000000000', 'hex')) as head) as h,
       (select (select se.before_ulid
                  from {{ q['session'] }} as se
                 where se.shard_id = $1 and se.state = 0
                 order by se.before_ulid limit 1) as first_pending,
               (select pg_catalog.count(*)::integer
                  from {{ q['session'] }} as se
                 where se.shard_id = $1 and se.state = 0) as pending) as p
  {%- endset -%}
  {{ return('create or replace function ' ~ q['safe_point'] ~ '(p_shard_id integer)
returns table (safe_point bytea, head bytea, pending integer)
language sql stable
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}
