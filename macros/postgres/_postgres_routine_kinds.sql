{#- The feed's routines for a mode, in creation order, as (kind, 'function' | 'procedure').
    capture: the trigger function of capture: trigger (mode none: every kind). -#}
{% macro _postgres_routine_kinds(mode, capture='none') %}
  {%- set kinds = [('lock_try', 'function')] -%}
  {%- if mode != 'outbox' -%}
    {%- do kinds.extend([('lock_wait', 'function'), ('lock', 'procedure'), ('ulid', 'function'),
                         ('update_state', 'function'), ('release', 'function')]) -%}
  {%- endif -%}
  {%- do kinds.extend([('safe_point', 'function'), ('read_feed', 'function'), ('tombstone', 'function'),
                       ('barrier_acquire', 'function'), ('barrier_check', 'function'), ('shards', 'function')]) -%}
  {%- if mode != 'blocking' -%}
    {%- do kinds.append(('move_outbox', 'procedure')) -%}
  {%- endif -%}
  {%- if mode is none or capture == 'trigger' -%}
    {%- do kinds.append(('capture', 'function')) -%}
  {%- endif -%}
  {{ return(kinds) }}
{% endmacro %}
