{#-
  The names of a feed's objects (protocol section 9), shortened by the long-name rule to
  PostgreSQL's 63 bytes: a mapping kind -> unquoted name. mode none gives every kind (for
  teardown of a feed whose registry row is gone). Also:
  * writer_role / reader_role: roles are cluster-wide, so their names include the database
    (`changefeed_writer:<database>.<schema>.<table>`);
  * guc: the session setting that carries a write in progress (`changefeed.w<md5(feed_id)>`;
    a custom setting name must be made of simple identifiers, so the feed id is hashed);
  * with capture: trigger (or mode none), the capture function and triggers
    (_postgres_capture_names).
  The registry stores this mapping; clients read it from there.
-#}
{% macro _postgres_feed_names(spec, mode) %}
  {%- set common = ['state', 'feed', 'session', 'incident', 'sequence', 'read_feed', 'safe_point',
                    'tombstone', 'barrier_acquire', 'barrier_check', 'shards', 'lock_try',
                    'feed_pk', 'state_pk', 'session_pk'] -%}
  {%- set blocking = ['lock', 'lock_wait', 'ulid', 'update_state', 'release'] -%}
  {%- set outbox = ['outbox', 'move_outbox', 'outbox_pk', 'outbox_txid', 'outbox_hint'] -%}
  {%- set kinds = common + (blocking if mode != 'outbox' else []) + (outbox if mode != 'blocking' else []) -%}
  {%- set names = {} -%}
  {%- for kind in kinds -%}
    {%- do names.update({kind: changefeed._feed_object_name(spec, kind, 63, 'bytes')}) -%}
  {%- endfor -%}
  {%- set role_spec = {} -%}
  {%- do role_spec.update(spec) -%}
  {%- do role_spec.update({'feed_id': spec['database'] ~ '.' ~ spec['feed_id']}) -%}
  {%- if mode is none or spec.get('capture') == 'trigger' -%}
    {%- do names.update(changefeed._postgres_capture_names(spec)) -%}
  {%- endif -%}
  {%- do names.update({
      'writer_role': changefeed._feed_object_name(role_spec, 'changefeed_writer', 63, 'bytes'),
      'reader_role': changefeed._feed_object_name(role_spec, 'changefeed_reader', 63, 'bytes'),
      'guc': 'changefeed.w' ~ local_md5(spec['feed_id']),
  }) -%}
  {{ return(names) }}
{% endmacro %}


{#- The capture function `capture:<feed>` (in the changefeed schema) and the triggers on the
    source table that call it. A trigger's name lives in its table's namespace, which two
    changefeed schemas may share, so trigger names carry the changefeed schema too:
    `capture_insert:<changefeed schema>.<schema>.<table>`. -#}
{% macro _postgres_capture_names(spec) %}
  {%- set trigger_spec = {} -%}
  {%- do trigger_spec.update(spec) -%}
  {%- do trigger_spec.update({'feed_id': spec['schema'] ~ '.' ~ spec['feed_id']}) -%}
  {%- set names = {'capture': changefeed._feed_object_name(spec, 'capture', 63, 'bytes')} -%}
  {%- for kind in changefeed._postgres_capture_trigger_kinds() -%}
    {%- do names.update({kind: changefeed._feed_object_name(trigger_spec, kind, 63, 'bytes')}) -%}
  {%- endfor -%}
  {{ return(names) }}
{% endmacro %}


{% macro _postgres_capture_trigger_kinds() %}
  {{ return(['capture_insert', 'capture_update', 'capture_delete', 'capture_truncate']) }}
{% endmacro %}
