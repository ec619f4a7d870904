{#- PL/pgSQL statements: the next block of a shard (protocol section 3, steps 1-4), for the
    lock call and the outbox mover alike. On entry `ms` and `high` hold the shard's current
    time and ulid_high and `next` its next free low half; `want_ms` is the time the write
    asks for (its hint, or now). On exit `ms`, `high` and `start` describe the block. -#}
{% macro _postgres_sql_next_block(ctx, shard, want_ms, ms, high, next, start, rand, fresh) %}
    {{ fresh }} := {{ want_ms }} > {{ ms }};
    if {{ fresh }} then
      {{ ms }} := {{ want_ms }};
    else
      {{ start }} := {{ next }};
      -- Headroom rule (step 4): continuing from 0 would sort below the block that ended
      -- at -1, and the next free start must fit in a bigint.
      if {{ start }} = 0 or {{ start }} > {{ ctx['max_low_start'] }}::bigint then
        {{ ms }} := {{ ms }} + 1;
        {{ fresh }} := true;
      end if;
    end if;
    if {{ ms }} > {{ ctx['max_ms'] }} then
      raise exception using errcode = 'CF007',
        message = 'changefeed: feed ' || {{ ctx['lit_feed'] }} || ' shard ' || {{ shard }}::text
          || ' has reached the end of the ULID time range';
    end if;
    if {{ fresh }} then
{{ changefeed._postgres_sql_fresh_block(ctx, ms, high, start, rand) }}
    end if;
{%- endmacro %}
