{#- create statements for the feed's functions and procedures, each followed by
    `revoke all ... from public` (PostgreSQL grants execute to public by default). -#}
{% macro _postgres_routine_statements(ctx) %}
  {%- set statements = [] -%}
  {%- for kind, word in changefeed._postgres_routine_kinds(ctx['mode'], ctx['capture']) -%}
    {%- if kind == 'lock_try' -%}{%- do statements.append(changefeed._postgres_routine_lock_try(ctx)) -%}
    {%- elif kind == 'lock_wait' -%}{%- do statements.append(changefeed._postgres_routine_lock_wait(ctx)) -%}
    {%- elif kind == 'lock' -%}{%- do statements.append(changefeed._postgres_routine_lock(ctx)) -%}
    {%- elif kind == 'ulid' -%}{%- do statements.append(changefeed._postgres_routine_ulid(ctx)) -%}
    {%- elif kind == 'update_state' -%}{%- do statements.append(changefeed._postgres_routine_update_state(ctx)) -%}
    {%- elif kind == 'release' -%}{%- do statements.append(changefeed._postgres_routine_release(ctx)) -%}
    {%- elif kind == 'safe_point' -%}{%- do statements.append(changefeed._postgres_routine_safe_point(ctx)) -%}
    {%- elif kind == 'read_feed' -%}{%- do statements.append(changefeed._postgres_routine_read_feed(ctx)) -%}
    {%- elif kind == 'tombstone' -%}{%- do statements.append(changefeed._postgres_routine_tombstone(ctx)) -%}
    {%- elif kind == 'barrier_acquire' -%}{%- do statements.append(changefeed._postgres_routine_barrier_acquire(ctx)) -%}
    {%- elif kind == 'barrier_check' -%}{%- do statements.append(changefeed._postgres_routine_barrier_check(ctx)) -%}
    {%- elif kind == 'shards' -%}{%- do statements.append(changefeed._postgres_routine_shards(ctx)) -%}
    {%- elif kind == 'move_outbox' -%}{%- do statements.append(changefeed._postgres_routine_move_outbox(ctx)) -%}
    {%- elif kind == 'capture' -%}{%- do statements.append(changefeed._postgres_routine_capture(ctx)) -%}
    {%- endif -%}
    {%- do statements.append('revoke all on ' ~ word ~ ' ' ~ ctx['q'][kind] ~ ' from public') -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}
