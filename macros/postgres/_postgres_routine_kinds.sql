{#- The feed's routines for a mode, in creation order, as (kind, 'function' | 'procedure'). -#}
{% macro _postgres_routine_kinds(mode) %}
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
  {{ return(kinds) }}
{% endmacro %}
