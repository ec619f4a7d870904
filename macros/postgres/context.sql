{#-
  The adapter's view of one feed spec (built and validated by macros/_feed/): its object
  names (protocol section 9) quoted once into a context (ctx) that every SQL generator
  takes, the options as the registry stores them, the key columns looked up in the
  catalogue, and the key signature the registry compares (section 10).
-#}


{#-
  Everything the SQL generators need about one feed, quoted once: qualified object names
  (q), raw names (n), literals, key column lists and the protocol constants. Pure: no
  queries. Fails clearly for key columns whose names the feed tables already use.
-#}
{% macro _postgres_feed_context(spec) %}
  {%- set reserved = ['shard_id', 'ulid', 'order_sequence', 'txid', 'time_hint']
      + (['row_image', 'row_deleted'] if spec.get('row_image') else []) -%}
  {%- set names = changefeed._postgres_feed_names(spec, spec['mode']) -%}
  {%- set schema = changefeed._postgres_ident(spec['schema']) -%}
  {%- set q = {} -%}
  {%- for kind, name in names.items() -%}
    {%- do q.update({kind: schema ~ '.' ~ changefeed._postgres_ident(name)}) -%}
  {%- endfor -%}
  {%- set key_defs = [] -%}
  {%- set key_list = [] -%}
  {%- set key_list_o = [] -%}
  {%- for key in spec['keys'] or [] -%}
    {%- if key['name'] in reserved -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ key['name'] ~ "' of " ~ spec['feed_id']
          ~ " has the name of a column of the feed's own tables (" ~ reserved | join(', ')
          ~ "); choose a key without it (key: [...]) or rename the column") }}
    {%- endif -%}
    {%- set ident = changefeed._postgres_ident(key['name']) -%}
    {%- do key_defs.append(ident ~ ' ' ~ key['data_type']
        ~ (' collate ' ~ key['collation'] if key.get('collation') else '') ~ ' not null') -%}
    {%- do key_list.append(ident) -%}
    {%- do key_list_o.append('o.' ~ ident) -%}
  {%- endfor -%}
  {%- set source = changefeed._postgres_ident(spec['source_schema']) ~ '.' ~ changefeed._postgres_ident(spec['source_table']) -%}
  {%- set bits = spec.get('block_bits', 36) -%}
  {%- set block = 2 ** bits -%}
  {{ return({
      'spec': spec,
      'mode': spec['mode'],
      'feed_id': spec['feed_id'],
      'schema': schema,
      'n': names,
      'q': q,
      'lit_feed': changefeed._postgres_literal(spec['feed_id']),
      'lit_guc': changefeed._postgres_literal(names['guc']),
      'lit_lock_prefix': changefeed._postgres_literal('changefeed/' ~ spec['feed_id'] ~ '/'),
      'lit_mover_prefix': changefeed._postgres_literal('changefeed/' ~ spec['feed_id'] ~ '/mover/'),
      'lit_sequence': changefeed._postgres_literal(q['sequence']),
      'capture': spec.get('capture') or 'none',
      'shard': spec.get('shard'),
      'row_image': spec.get('row_image') is sameas true,
      'capture_names': changefeed._postgres_capture_names(spec),
      'q_source': source,
      'lit_source': changefeed._postgres_literal(source),
      'key_defs': key_defs | join(',\n  '),
      'key_list': key_list | join(', '),
      'key_list_o': key_list_o | join(', '),
      'block_bits': bits,
      'block': block,
      'block_mask': -(2 ** 62) - block,
      'max_low_start': 9223372036854775807 - block,
      'max_ms': 2 ** 48 - 1,
      'stall_timeout_ms': spec.get('stall_timeout_ms', 5000),
      'lock_probe_ms': spec.get('lock_probe_ms', 20),
      'session_clean_at': 8,
      'incident_keep': 1000,
  }) }}
{% endmacro %}


{#-
  The names of a feed's objects (protocol section 9), shortened by the long-name rule to
  PostgreSQL's 63 bytes: a mapping kind -> unquoted name. mode none gives every kind (for
  teardown of a feed whose registry row is gone). The keys are both adapters' (see
  _feed_routine_kinds, macros/_feed/spec.sql). Also:
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
                    'feed_pk', 'state_pk', 'session_pk', 'feed_ulid',
                    'retention', 'consumer', 'retention_pk', 'consumer_pk', 'retain', 'save_cursor',
                    'forget_consumer', 'snapshot', 'snapshot_pk', 'snapshot_begin', 'snapshot_finish'] -%}
  {%- set blocking = ['lock', 'lock_wait', 'ulid', 'update_state', 'release', 'guard'] -%}
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
    `capture_insert:<changefeed schema>.<schema>.<table>`. The event trigger that
    re-creates them on a re-created source table (`recapture`, protocol 5.1) is named in
    the database's one namespace of event triggers, so it carries the changefeed schema
    too; its function `recapture:<feed>` lives in the changefeed schema. -#}
{% macro _postgres_capture_names(spec) %}
  {%- set trigger_spec = {} -%}
  {%- do trigger_spec.update(spec) -%}
  {%- do trigger_spec.update({'feed_id': spec['schema'] ~ '.' ~ spec['feed_id']}) -%}
  {%- set names = {'capture': changefeed._feed_object_name(spec, 'capture', 63, 'bytes'),
                   'recapture': changefeed._feed_object_name(spec, 'recapture', 63, 'bytes')} -%}
  {%- for kind in changefeed._postgres_capture_trigger_kinds() + ['recapture_trigger'] -%}
    {%- do names.update({kind: changefeed._feed_object_name(trigger_spec, kind, 63, 'bytes')}) -%}
  {%- endfor -%}
  {{ return(names) }}
{% endmacro %}


{% macro _postgres_capture_trigger_kinds() %}
  {{ return(['capture_insert', 'capture_update', 'capture_delete', 'capture_truncate']) }}
{% endmacro %}


{#- The options a feed's generated code depends on, as stored in the registry. -#}
{#- capture and shard are stored only for capture: trigger, and row_image only when true, so
    that the options of feeds registered before these existed still compare equal. -#}
{% macro _postgres_feed_options(spec) %}
  {%- set options = {
      'stall_timeout_ms': spec['stall_timeout_ms'],
      'lock_probe_ms': spec['lock_probe_ms'],
      'block_bits': spec.get('block_bits', 36),
  } -%}
  {%- if spec.get('capture') == 'trigger' -%}
    {%- do options.update({'capture': 'trigger', 'shard': spec['shard']}) -%}
  {%- endif -%}
  {%- if spec.get('row_image') -%}
    {%- do options.update({'row_image': true}) -%}
  {%- endif -%}
  {{ return(options) }}
{% endmacro %}


{#-
  The key columns of a source table, for the feed spec: a list of
  {"name", "data_type", "collation"} with data_type as PostgreSQL formats it
  (format_type) and collation none unless it differs from the type's default (then the
  qualified, quoted collation name). key_names none means the table's primary key.
-#}
{% macro _postgres_key_columns(relation, key_names) %}
  {%- set shown = relation.schema ~ '.' ~ relation.identifier -%}
  {%- if relation.database and target.database and relation.database != target.database -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: " ~ shown ~ " is in database " ~ relation.database ~ " but the connection is to "
        ~ target.database ~ "; PostgreSQL feeds live in the database of their table") }}
  {%- endif -%}
  {%- set columns = changefeed._postgres_query_json("
    select pg_catalog.json_agg(pg_catalog.json_build_object(
             'name', a.attname,
             'data_type', pg_catalog.format_type(a.atttypid, a.atttypmod),
             'collation', case when a.attcollation <> 0 and a.attcollation <> t.typcollation
                               then pg_catalog.quote_ident(cn.nspname) || '.' || pg_catalog.quote_ident(co.collname) end,
             'pk_position', pg_catalog.array_position(pk.conkey, a.attnum))
           order by a.attnum)
      from pg_catalog.pg_class as c
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
      join pg_catalog.pg_attribute as a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      join pg_catalog.pg_type as t on t.oid = a.atttypid
      left join pg_catalog.pg_collation as co on co.oid = a.attcollation
      left join pg_catalog.pg_namespace as cn on cn.oid = co.collnamespace
      left join pg_catalog.pg_constraint as pk on pk.conrelid = c.oid and pk.contype = 'p'
     where n.nspname = " ~ changefeed._postgres_literal(relation.schema) ~ "
       and c.relname = " ~ changefeed._postgres_literal(relation.identifier) ~ "
       and c.relkind in ('r', 'p', 'v', 'm', 'f')") -%}
  {%- if not columns -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: table " ~ shown ~ " does not exist (names are case-sensitive and used as written)") }}
  {%- endif -%}
  {%- set keys = [] -%}
  {%- if key_names is none -%}
    {%- for column in columns | selectattr('pk_position') | sort(attribute='pk_position') -%}
      {%- do keys.append({'name': column['name'], 'data_type': column['data_type'], 'collation': column['collation']}) -%}
    {%- endfor -%}
    {%- if keys | length == 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: table " ~ shown ~ " has no primary key, so the feed's key cannot default to it;"
          ~ " name the key columns with key: [...] (columns: " ~ columns | map(attribute='name') | join(', ') ~ ")") }}
    {%- endif -%}
  {%- else -%}
    {%- for name in key_names -%}
      {%- set found = columns | selectattr('name', 'equalto', name) | list -%}
      {%- if found | length == 0 -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: key column '" ~ name ~ "' is not a column of " ~ shown
            ~ "; its columns are: " ~ columns | map(attribute='name') | join(', ')) }}
      {%- endif -%}
      {%- do keys.append({'name': found[0]['name'], 'data_type': found[0]['data_type'], 'collation': found[0]['collation']}) -%}
    {%- endfor -%}
  {%- endif -%}
  {{ return(keys) }}
{% endmacro %}


{#- A feed's key as one comparable, readable string: `"order_id" bigint, "sku" text collate "C"`. -#}
{% macro _postgres_key_signature(keys) %}
  {%- set parts = [] -%}
  {%- for key in keys or [] -%}
    {%- do parts.append(changefeed._postgres_ident(key['name']) ~ ' ' ~ key['data_type']
        ~ (' collate ' ~ key['collation'] if key.get('collation') else '')) -%}
  {%- endfor -%}
  {{ return(parts | join(', ')) }}
{% endmacro %}
