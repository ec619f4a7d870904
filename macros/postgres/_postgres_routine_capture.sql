{#- capture:<feed>() -> trigger: the trigger function of capture: trigger (protocol section 5).
    Statement-level AFTER triggers with transition tables call it once per statement, so a
    statement of n rows costs one INSERT ... SELECT rather than n function calls (measured:
    as fast as a row trigger for one row, 2-3x faster for bulk statements). Every row it
    writes carries the writer's transaction id (the outbox's default), so one source
    transaction stays one block (O2). An UPDATE records the old and the new keys (both are
    events when the key or the shard changes; `union` keeps one when neither does). TRUNCATE
    would remove rows without events, so it is refused.
    SECURITY DEFINER: the writer needs rights on the source table only. -#}
{% macro _postgres_routine_capture(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set body -%}
#variable_conflict use_column
begin
  -- The source's columns may be named like PL/pgSQL variables (found, tg_op): use_column
  -- makes them mean the column in the shard expression.
  if tg_op = 'INSERT' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_new', 'n')]) }};
  elsif tg_op = 'UPDATE' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_old', 'o'), ('cf_new', 'n')]) }};
  elsif tg_op = 'DELETE' then
    {{ changefeed._postgres_sql_capture_insert(ctx, [('cf_old', 'o')]) }};
  else
    raise exception using errcode = 'CF009',
      message = 'changefeed: TRUNCATE of ' || {{ ctx['lit_source'] }} || ' would remove rows without events for the feed '
        || {{ ctx['lit_feed'] }} || ' (capture: trigger)',
      hint = 'Delete the rows instead (each becomes an event), or tear the feed down first.';
  end if;
  return null;
end
  {%- endset -%}
  {{ return('create or replace function ' ~ ctx['q']['capture'] ~ '()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- `insert into <outbox> (shard_id, <keys>) select (<shard>), a.<keys> from <relation> as a
    [union select ...]`: the statement the capture trigger runs, over transition tables, and
    that setup runs over the source table (`where false`) to check the shard expression.
    The shard expression's columns are unqualified, so they resolve to the one relation of
    each select; the insert's assignment cast makes it an integer (text is refused). -#}
{% macro _postgres_sql_capture_insert(ctx, sources, where='') %}
  {%- set selects = [] -%}
  {%- for relation, alias in sources -%}
    {%- set keys = [] -%}
    {%- for key in ctx['spec']['keys'] -%}
      {%- do keys.append(alias ~ '.' ~ changefeed._postgres_ident(key['name'])) -%}
    {%- endfor -%}
    {%- do selects.append('select (' ~ ctx['shard'] ~ '), ' ~ keys | join(', ') ~ ' from ' ~ relation ~ ' as ' ~ alias ~ where) -%}
  {%- endfor -%}
  {{ return('insert into ' ~ ctx['q']['outbox'] ~ ' (shard_id, ' ~ ctx['key_list'] ~ ')\n    '
            ~ selects | join('\n    union\n    ')) }}
{% endmacro %}
