{#-
  The names of a feed's objects (protocol section 9), shortened by the long-name rule to
  PostgreSQL's 63 bytes: a mapping kind -> unquoted name. mode none gives every kind (for
  teardown of a feed whose registry row is gone). Also:
  * writer_role / reader_role: roles are cluster-wide, so their names include the database
    (`changefeed_writer:<database>.<schema>.<table>`);
  * guc: the session setting that carries a write in progress (`changefeed.w<md5(feed_id)>`;
    a custom setting name must be made of simple identifiers, so the feed id is hashed).
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
  {%- do names.update({
      'writer_role': changefeed._feed_object_name(role_spec, 'changefeed_writer', 63, 'bytes'),
      'reader_role': changefeed._feed_object_name(role_spec, 'changefeed_reader', 63, 'bytes'),
      'guc': 'changefeed.w' ~ local_md5(spec['feed_id']),
  }) -%}
  {{ return(names) }}
{% endmacro %}
