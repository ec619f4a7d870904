{#-
  Everything the T-SQL generators need about one feed, computed and quoted once: object
  names (raw, quoted, as a string literal), key column lists, lock and session_context
  names, and the protocol constants. Pure: no queries, no adapter calls.

  Names follow mssql-changefeed, `[changefeed].[kind:schema.table]`, and are shortened by
  changefeed._feed_object_name (protocol section 9, unit = UTF-16 code units, limit 128) when
  longer. mode none (teardown) lists the objects of both modes.

  capture: trigger adds the trigger `capture:<changefeed schema>.<schema>.<table>` on the
  source table, in the source table's schema (where SQL Server keeps a table's triggers;
  the changefeed schema in its name keeps two changefeed schemas' triggers apart). It is
  not among the registered names: a feed gains or loses it by a change of capture.
-#}
{% macro _sqlserver_feed_context(spec) %}
  {%- set mode = spec.get('mode') -%}
  {%- set schema_sql = changefeed._sqlserver_quote_name(spec['schema']) -%}

  {#- key: (kind, class, modes). key is the object's key in both adapters' contexts (see
      _feed_routine_kinds, macros/_feed/spec.sql); kind begins its name (`pk:feed:<feed>`). -#}
  {%- set kinds = {
      'state': ('state', 'table', ['blocking', 'outbox']),
      'feed': ('feed', 'table', ['blocking', 'outbox']),
      'outbox': ('outbox', 'table', ['outbox']),
      'session': ('session', 'table', ['blocking', 'outbox']),
      'incident': ('incident', 'table', ['blocking', 'outbox']),
      'sequence': ('sequence', 'sequence', ['blocking', 'outbox']),
      'read_type': ('type:read', 'type', ['blocking', 'outbox']),
      'lock': ('lock', 'procedure', ['blocking']),
      'update_state': ('update_state', 'procedure', ['blocking']),
      'release': ('release', 'procedure', ['blocking']),
      'ulid': ('ulid', 'function', ['blocking']),
      'feed_write_lock': ('feed_write_lock', 'procedure', ['outbox']),
      'read_feed': ('read_feed', 'procedure', ['blocking', 'outbox']),
      'safe_point': ('safe_point', 'procedure', ['blocking', 'outbox']),
      'tombstone': ('tombstone', 'procedure', ['blocking', 'outbox']),
      'barrier_acquire': ('barrier_acquire', 'procedure', ['blocking', 'outbox']),
      'barrier_check': ('barrier_check', 'procedure', ['blocking', 'outbox']),
      'shards': ('shards', 'procedure', ['blocking', 'outbox']),
      'retention': ('retention', 'table', ['blocking', 'outbox']),
      'consumer': ('consumer', 'table', ['blocking', 'outbox']),
      'retain': ('retain', 'procedure', ['blocking', 'outbox']),
      'save_cursor': ('save_cursor', 'procedure', ['blocking', 'outbox']),
      'forget_consumer': ('forget_consumer', 'procedure', ['blocking', 'outbox']),
      'snapshot': ('snapshot', 'table', ['blocking', 'outbox']),
      'snapshot_begin': ('snapshot_begin', 'procedure', ['blocking', 'outbox']),
      'snapshot_finish': ('snapshot_finish', 'procedure', ['blocking', 'outbox']),
      'writer_role': ('changefeed_writer', 'role', ['blocking', 'outbox']),
      'reader_role': ('changefeed_reader', 'role', ['blocking', 'outbox']),
      'state_pk': ('pk:state', 'constraint', ['blocking', 'outbox']),
      'feed_pk': ('pk:feed', 'constraint', ['blocking', 'outbox']),
      'outbox_pk': ('pk:outbox', 'constraint', ['outbox']),
      'session_pk': ('pk:session', 'constraint', ['blocking', 'outbox']),
      'incident_pk': ('pk:incident', 'constraint', ['blocking', 'outbox']),
      'retention_pk': ('pk:retention', 'constraint', ['blocking', 'outbox']),
      'consumer_pk': ('pk:consumer', 'constraint', ['blocking', 'outbox']),
      'snapshot_pk': ('pk:snapshot', 'constraint', ['blocking', 'outbox']),
      'ck_session_state': ('ck:session.state', 'constraint', ['blocking', 'outbox']),
      'df_order_sequence': ('df:outbox.order_sequence', 'constraint', ['outbox']),
      'df_txid': ('df:outbox.txid', 'constraint', ['outbox']),
      'df_time_hint': ('df:outbox.time_hint', 'constraint', ['outbox']),
      'outbox_hint': ('ck:outbox.time_hint', 'constraint', ['outbox']),
      'outbox_txid': ('ix:outbox.txid', 'index', ['outbox']),
  } -%}
  {#- Row images (protocol 5.2) need an image column in read_feed's page type and its #read
      contract, which SQL Server does not have yet: refuse before anything is generated. -#}
  {%- if spec.get('row_image') -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: row_image: true (row images, docs/protocol.md 5.2) is not supported on SQL Server"
        ~ " yet (feed " ~ spec['feed_id'] ~ "); set row_image: false: readers then join back to the"
        ~ " source for the payload, and a history of the feed has landing granularity (docs/spark.md)") }}
  {%- endif -%}
  {%- set capture = spec.get('capture') or 'none' -%}
  {#- The shard expression was checked by _feed_options (macros/_feed/spec.sql). -#}
  {%- set shard = spec.get('shard') if capture == 'trigger' else none -%}
  {%- set source_sql = changefeed._sqlserver_quote_name(spec['source_schema']) ~ '.'
      ~ changefeed._sqlserver_quote_name(spec['source_table']) -%}
  {%- set trigger_spec = {} -%}
  {%- do trigger_spec.update(spec) -%}
  {%- do trigger_spec.update({'feed_id': spec['schema'] ~ '.' ~ spec['feed_id']}) -%}
  {%- set trigger_raw = changefeed._feed_object_name(trigger_spec, 'capture', 128, 'utf16') -%}
  {%- set trigger_sql = changefeed._sqlserver_quote_name(spec['source_schema']) ~ '.'
      ~ changefeed._sqlserver_quote_name(trigger_raw) -%}
  {%- set trigger = {'name': trigger_raw, 'class': 'trigger', 'sql': trigger_sql,
                     'lit': changefeed._sqlserver_literal(trigger_sql)} -%}
  {%- set n = {} -%}
  {%- set own = {} -%}
  {%- for key, about in kinds.items() -%}
    {%- set kind, cls, modes = about -%}
    {%- if mode is none or mode in modes -%}
      {%- set raw = changefeed._feed_object_name(spec, kind, 128, 'utf16') -%}
      {%- set quoted = changefeed._sqlserver_quote_name(raw) -%}
      {%- if cls == 'role' -%}
        {%- set entry = {'name': raw, 'class': cls, 'sql': quoted,
                         'lit': changefeed._sqlserver_literal(raw)} -%}
      {%- elif cls in ['constraint', 'index'] -%}
        {%- set entry = {'name': raw, 'class': cls, 'sql': quoted,
                         'lit': changefeed._sqlserver_literal(schema_sql ~ '.' ~ quoted)} -%}
      {%- else -%}
        {%- set entry = {'name': raw, 'class': cls, 'sql': schema_sql ~ '.' ~ quoted,
                         'lit': changefeed._sqlserver_literal(schema_sql ~ '.' ~ quoted)} -%}
      {%- endif -%}
      {%- do n.update({key: entry}) -%}
      {%- do own.update({key: raw}) -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if mode is none or capture == 'trigger' -%}
    {%- do n.update({'capture': trigger}) -%}
  {%- endif -%}
  {#- capture_check:<feed>, the procedure read_feed calls at the head to find a lost capture
      trigger (protocol O6; outbox.sql). Not registered, as the trigger: it comes and goes
      with capture: trigger, and capture: none drops it. -#}
  {%- if mode in [none, 'outbox'] -%}
    {%- set check_raw = changefeed._feed_object_name(spec, 'capture_check', 128, 'utf16') -%}
    {%- do n.update({'capture_check': {'name': check_raw, 'class': 'procedure',
        'sql': schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(check_raw),
        'lit': changefeed._sqlserver_literal(schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(check_raw))}}) -%}
  {%- endif -%}
  {#- recapture:<changefeed schema>.<feed>, the database DDL trigger that captures a
      re-created source table (protocol 5.1; outbox.sql). Database-wide, so no schema in its
      SQL name (the changefeed schema is in the name, as in the capture trigger's); not
      registered either: it comes and goes with capture: trigger. `lit` is its bare name,
      as sys.triggers holds it (object_id() finds no DDL trigger). -#}
  {%- if mode in [none, 'outbox'] -%}
    {%- set recapture_raw = changefeed._feed_object_name(trigger_spec, 'recapture', 128, 'utf16') -%}
    {%- do n.update({'recapture': {'name': recapture_raw, 'class': 'ddl trigger',
        'sql': changefeed._sqlserver_quote_name(recapture_raw),
        'lit': changefeed._sqlserver_literal(recapture_raw)}}) -%}
  {%- endif -%}
  {#- guard:<feed>, the blocking feed table's insert trigger (writer.sql). In the changefeed
      schema with its table; not registered either: it comes and goes with the feed table,
      and setup and upgrade create or alter it every time. -#}
  {%- if mode in [none, 'blocking'] -%}
    {%- set guard_raw = changefeed._feed_object_name(spec, 'guard', 128, 'utf16') -%}
    {%- do n.update({'guard': {'name': guard_raw, 'class': 'trigger',
        'sql': schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(guard_raw),
        'lit': changefeed._sqlserver_literal(schema_sql ~ '.' ~ changefeed._sqlserver_quote_name(guard_raw))}}) -%}
  {%- endif -%}
  {#- The names a feed set up by an older package registered: without snapshots, and
      without retention (nor snapshots). Setup accepts them as the same feed and adds the
      missing objects ('updated'). -#}
  {%- set before_snapshot = {} -%}
  {%- set before_retention = {} -%}
  {%- for key, raw in own.items() if key not in changefeed._sqlserver_snapshot_kinds() -%}
    {%- do before_snapshot.update({key: raw}) -%}
    {%- if key not in changefeed._sqlserver_retention_kinds() -%}
      {%- do before_retention.update({key: raw}) -%}
    {%- endif -%}
  {%- endfor -%}

  {#- Key columns. The feed's own column names are reserved (compared case-insensitively,
      as the usual case-insensitive collations would). -#}
  {%- set reserved = ['shard_id', 'ulid', 'order_sequence', 'txid', 'time_hint'] -%}
  {%- set keys = spec.get('keys') or [] -%}
  {%- set seen = [] -%}
  {%- set key_names = [] -%}
  {%- set key_decls = [] -%}
  {%- set key_sig = [] -%}
  {%- for key in keys -%}
    {%- if key is not mapping or not key.get('name') or not key.get('data_type') -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: every key column needs a name and a data_type; got: " ~ key) }}
    {%- endif -%}
    {%- set name = key['name'] -%}
    {%- if name | lower in reserved -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ name ~ "' of " ~ spec['feed_id']
          ~ " has the name of a column of the feed's own tables (" ~ reserved | join(', ')
          ~ "); choose another key (key: [...]) or rename the column") }}
    {%- endif -%}
    {%- if name | lower in seen -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ name ~ "' of " ~ spec['feed_id'] ~ " is listed twice") }}
    {%- endif -%}
    {%- do seen.append(name | lower) -%}
    {%- set data_type = key['data_type'] | string | trim -%}
    {%- if not modules.re.fullmatch('(?i)[a-z][a-z0-9_]*( ?\\( ?(max|[0-9]+)( ?, ?[0-9]+)? ?\\))?', data_type) -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ name ~ "' of " ~ spec['feed_id']
          ~ " has a data type that cannot be written safely into T-SQL: " ~ data_type) }}
    {%- endif -%}
    {%- set collation = key.get('collation') -%}
    {%- if collation and not modules.re.fullmatch('[A-Za-z0-9_]+', collation) -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key column '" ~ name ~ "' of " ~ spec['feed_id']
          ~ " has an unexpected collation name: " ~ collation) }}
    {%- endif -%}
    {%- set nullable = key.get('nullable', false) -%}
    {%- set quoted = changefeed._sqlserver_quote_name(name) -%}
    {%- do key_names.append(quoted) -%}
    {%- do key_decls.append(quoted ~ ' ' ~ data_type
        ~ (' collate ' ~ collation if collation else '')
        ~ (' null' if nullable else ' not null')) -%}
    {%- do key_sig.append([name, data_type, collation or none, nullable]) -%}
  {%- endfor -%}

  {#- Protocol constants (section 3). Jinja has no bitwise operators, so the masks are
      computed arithmetically and written as 8-byte hex literals. -#}
  {%- set bits = spec.get('block_bits', 36) -%}
  {%- set block = 2 ** bits -%}
  {%- set stall = spec.get('stall_timeout_ms', 5000) -%}
  {%- set probe = spec.get('lock_probe_ms', 20) -%}

  {#- Lock and session_context names. The lock name is `<schema>/<feed_id>/<shard>/<generation>`
      (protocol 4.1; `changefeed/shop.orders/0/0` by default). sp_getapplock takes at most
      255 characters, so the feed id is shortened by the long-name rule to leave room for
      the longest shard and generation suffix. -#}
  {%- set lock_stem = changefeed._feed_object_name(spec, spec['schema'], 255 - 23, 'utf16') -%}
  {%- set lock_prefix = spec['schema'] ~ '/' ~ lock_stem[spec['schema'] | length + 1:] ~ '/' -%}
  {%- set context_key = 'changefeed/' ~ local_md5(spec['schema'] ~ '/' ~ spec['feed_id']) ~ '/' -%}
  {%- set options = {'stall_timeout_ms': stall, 'lock_probe_ms': probe, 'block_bits': bits} -%}
  {#- Stored only for capture: trigger, so feeds registered before capture existed compare equal. -#}
  {%- if capture == 'trigger' -%}
    {%- do options.update({'capture': capture, 'shard': shard}) -%}
  {%- endif -%}

  {{ return({
      'spec': spec,
      'mode': mode,
      'feed_id': spec['feed_id'],
      'feed_lit': changefeed._sqlserver_literal(spec['feed_id']),
      'schema_sql': schema_sql,
      'schema_lit': changefeed._sqlserver_literal(spec['schema']),
      'n': n,
      'capture': capture,
      'shard': shard,
      'capture_trigger': trigger,
      'source_sql': source_sql,
      'source_lit': changefeed._sqlserver_literal(source_sql),
      'names_json': tojson(changefeed._sqlserver_registry_names(own), sort_keys=true),
      'names_json_older': [tojson(changefeed._sqlserver_registry_names(before_snapshot), sort_keys=true),
                           tojson(changefeed._sqlserver_registry_names(before_retention), sort_keys=true)],
      'key_names': key_names,
      'key_decls': key_decls,
      'key_sig_json': tojson(key_sig),
      'options_json': tojson(options, sort_keys=true),
      'version': spec.get('protocol_version', 1),
      'bits': bits,
      'block': block,
      'block_minus_1': block - 1,
      'max_continue': 2 ** 63 - 1 - block,
      'fresh_mask': '0x%016X' % (2 ** 64 - 2 ** 62 - block),
      'align_mask': '0x%016X' % (2 ** 64 - block),
      'stall_timeout_ms': stall,
      'lock_probe_ms': probe,
      'source_lock_timeout_ms': 10000,
      'incident_keep': 1000,
      'lock_prefix_lit': changefeed._sqlserver_literal(lock_prefix),
      'retention_lock_lit': changefeed._sqlserver_literal(lock_prefix ~ 'retention'),
      'setup_lock_lit': changefeed._sqlserver_literal(spec['schema'] ~ '/setup'),
      'key_u': changefeed._sqlserver_literal(context_key ~ 'u'),
      'key_w': changefeed._sqlserver_literal(context_key ~ 'w'),
      'key_s': changefeed._sqlserver_literal(context_key ~ 's'),
      'key_n': changefeed._sqlserver_literal(context_key ~ 'n'),
      'zero16': '0x00000000000000000000000000000000',
  }) }}
{% endmacro %}


{#-
  The key columns of a SQL Server table, from the catalogue: a list of
  {name, data_type, collation, nullable}, data_type spelled with its length, precision
  or scale, alias types replaced by their base type, the collation kept.
  key_names none -> the primary key's columns in key order (error if there is none);
  otherwise the named columns in the given order (error naming any that is missing).
-#}
{% macro _sqlserver_key_columns(relation, key_names) %}
  {%- if relation.database and target.database and relation.database | lower != target.database | lower -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: " ~ relation ~ " is in database " ~ relation.database ~ ", but dbt is connected to "
        ~ target.database ~ "; a feed lives in its table's database, so run this against "
        ~ relation.database) }}
  {%- endif -%}
  {%- set object_name = changefeed._sqlserver_quote_name(relation.schema) ~ '.'
      ~ changefeed._sqlserver_quote_name(relation.identifier) -%}
  {%- set query = changefeed._sqlserver_key_columns_query(object_name) -%}
  {%- set result = run_query(query) -%}
  {%- if result is none or result.rows | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: table " ~ object_name ~ " was not found (or has no columns you may see)") }}
  {%- endif -%}
  {%- set columns = [] -%}
  {%- for row in result.rows -%}
    {%- do columns.append({
        'name': row['column_name'],
        'data_type': changefeed._sqlserver_spell_type(
            row['type_name'], row['max_length'], row['precision'], row['scale']),
        'collation': row['collation_name'],
        'nullable': row['is_nullable'] in [true, 1],
        'key_ordinal': row['key_ordinal'],
    }) -%}
  {%- endfor -%}
  {%- set chosen = [] -%}
  {%- if key_names is none -%}
    {%- for column in columns | selectattr('key_ordinal') | sort(attribute='key_ordinal') -%}
      {%- do chosen.append(column) -%}
    {%- endfor -%}
    {%- if chosen | length == 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: " ~ object_name ~ " has no primary key; name the key columns with key: [column, ...]") }}
    {%- endif -%}
  {%- else -%}
    {%- for wanted in key_names -%}
      {%- set exact = columns | selectattr('name', 'equalto', wanted) | list -%}
      {%- set folded = [] -%}
      {%- for column in columns if column['name'] | lower == wanted | lower -%}
        {%- do folded.append(column) -%}
      {%- endfor -%}
      {%- if exact | length == 1 -%}
        {%- do chosen.append(exact[0]) -%}
      {%- elif folded | length == 1 -%}
        {%- do chosen.append(folded[0]) -%}
      {%- else -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: key column '" ~ wanted ~ "' is not a column of " ~ object_name ~ "; its columns: "
            ~ columns | map(attribute='name') | join(', ')) }}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- set keys = [] -%}
  {%- for column in chosen -%}
    {%- do keys.append({
        'name': column['name'],
        'data_type': column['data_type'],
        'collation': column['collation'],
        'nullable': column['nullable'],
    }) -%}
  {%- endfor -%}
  {{ return(keys) }}
{% endmacro %}


{#-
  The catalogue query behind _sqlserver_key_columns, for one table given as a quoted
  two-part name: every column with its type (an alias type's base type), length,
  precision, scale, collation, nullability and position in the primary key.
-#}
{% macro _sqlserver_key_columns_query(object_name) -%}
select
    c.name as column_name,
    case
        when t.is_assembly_type = 1 or t.is_user_defined = 0 then t.name
        else b.name
    end as type_name,
    c.max_length,
    c.[precision],
    c.[scale],
    c.collation_name,
    c.is_nullable,
    k.key_ordinal
from sys.columns as c
inner join sys.types as t on t.user_type_id = c.user_type_id
left join sys.types as b on b.user_type_id = c.system_type_id
left join (
    select ic.column_id, ic.key_ordinal
    from sys.indexes as i
    inner join sys.index_columns as ic on ic.object_id = i.object_id and ic.index_id = i.index_id
    where i.object_id = object_id({{ changefeed._sqlserver_literal(object_name) }}) and i.is_primary_key = 1
) as k on k.column_id = c.column_id
where c.object_id = object_id({{ changefeed._sqlserver_literal(object_name) }})
order by c.column_id
{%- endmacro %}
