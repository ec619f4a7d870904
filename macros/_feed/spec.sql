{#-
  Config -> spec: the adapter-neutral first half of setup_feed, upgrade_feed, teardown_feed
  and feed_post_hook. Everything a user writes (a model's `changefeed` config or the
  macros' arguments) is validated here, once, before any adapter code runs; what comes
  out is the feed spec every adapter generates its SQL from (docs/contributing.md).

  In order: _feed_model_config (the model's config), _feed_build_spec (the entry point),
  _feed_options (validation), _feed_relation, _feed_spec / _feed_identity, the object
  names derived from a spec (_feed_object_name), the routines of each mode
  (_feed_routine_kinds, _feed_routine_macro) and the tables (_feed_table_kinds).
-#}

{#-
  The changefeed config of the model being built: `meta: {changefeed: {...}}`, or the
  top-level `changefeed` key. dbt 1.10+ warns about custom top-level config keys
  (CustomKeyInConfigDeprecation) and may refuse them one day, so `meta` is the form the
  docs recommend; the top-level key keeps working. none when the model has neither.
-#}
{% macro _feed_model_config() %}
  {#- Read from the node's config as a plain mapping: dbt 1.11 warns (D041, "use
      config.meta_get") whenever config.get() finds a key under meta. -#}
  {%- set top = model.config.get('changefeed') -%}
  {%- set meta = model.config.get('meta') -%}
  {%- set nested = meta.get('changefeed') if meta is mapping else none -%}
  {%- if top is not none and nested is not none and top != nested -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' sets a changefeed config both under meta ("
        ~ nested ~ ") and as a top-level config key (" ~ top ~ "), and they differ; keep one,"
        ~ " preferably meta: {changefeed: ...}") }}
  {%- endif -%}
  {{ return(nested if nested is not none else top) }}
{% endmacro %}


{#-
  What feed_post_hook knows of the model being built, for _feed_model_rules: its name, its
  materialization, and whether this run rebuilds it (--full-refresh, unless the model sets
  full_refresh: false).
-#}
{% macro _feed_model_context() %}
  {{ return({
      'name': model.name,
      'materialization': config.get('materialized'),
      'full_refresh': should_full_refresh(),
  }) }}
{% endmacro %}


{#-
  A feed on a dbt model must record every write dbt makes to it, and nothing may be lost
  when dbt rebuilds it (docs/macros.md, feed_post_hook). Only an incremental model keeps
  its rows from run to run, and only capture: trigger sees dbt's own inserts, updates and
  deletes, so:
    table, view, ...   refused (dbt replaces the relation on every run);
    incremental        needs mode: outbox and capture: trigger;
    --full-refresh     refused (the rebuilt table's deletions would never reach consumers).
  The post-hook runs inside the model's transaction, so the error rolls the run back and
  the table keeps its rows.
-#}
{% macro _feed_model_rules(model, options) %}
  {%- set where = "changefeed: model '" ~ model['name'] ~ "'" -%}
  {%- set app_owned = "for a table that applications write, keep it out of dbt's models (declare it"
      ~ " as a source) and set its feed up with dbt run-operation changefeed.setup_feed"
      ~ " --args '{relation: schema.table, mode: blocking}'" -%}
  {%- if model['materialization'] != 'incremental' -%}
    {{ exceptions.raise_compiler_error(
        where ~ " is materialized as '" ~ model['materialization'] ~ "', which dbt rebuilds on every"
        ~ " run: its rows would be replaced without a single event. Use one of: (1) materialized="
        ~ "'incremental' with meta: {changefeed: {mode: outbox, capture: trigger}}, so the feed"
        ~ " records what each run writes; (2) " ~ app_owned ~ ". Nothing was changed: the run was"
        ~ " rolled back") }}
  {%- endif -%}
  {%- if options['mode'] != 'outbox' or options['capture'] != 'trigger' -%}
    {{ exceptions.raise_compiler_error(
        where ~ " is incremental with mode: " ~ options['mode'] ~ ", capture: " ~ options['capture']
        ~ "; a feed on a dbt model records dbt's own writes only with mode: outbox and"
        ~ " capture: trigger (dbt's inserts, updates and deletes take no shard lock and write"
        ~ " no outbox rows). Set meta: {changefeed: {mode: outbox, capture: trigger}}, or " ~ app_owned) }}
  {%- endif -%}
  {%- if model['full_refresh'] -%}
    {{ exceptions.raise_compiler_error(
        where ~ ": --full-refresh rebuilds its table without events, so rows it no longer has"
        ~ " would never be deleted downstream. Set full_refresh: false on the model (dbt then"
        ~ " runs it incrementally even with --full-refresh), or tear the feed down first (dbt"
        ~ " run-operation changefeed.teardown_feed --args '{relation: ...}'), rebuild, and"
        ~ " full-refresh its consumers. Nothing was changed: the run was rolled back") }}
  {%- endif -%}
{% endmacro %}


{#- setup_feed found a model's feed registered but its capture triggers gone: the table was
    rebuilt (dropped and re-created) outside a run that feed_post_hook could refuse. -#}
{% macro _feed_model_rebuilt_error(spec) %}
  {{ exceptions.raise_compiler_error(
      "changefeed: the table of model '" ~ spec['model']['name'] ~ "' (" ~ spec['source_relation']
      ~ ") was rebuilt without its capture triggers, so the writes since then have no events."
      ~ " Tear the feed down (dbt run-operation changefeed.teardown_feed --args '{relation: "
      ~ spec['feed_id'] ~ "}'), run the model again (its new feed starts with an event for"
      ~ " every row), and full-refresh its consumers. Nothing was changed: the run was rolled back") }}
{% endmacro %}


{#-
  The adapter-neutral first half of setup and upgrade: validate the options (once, here),
  apply the rules for feeds on dbt models, resolve the relation, ask the adapter for the
  key columns, and build the spec.
    options      the raw mapping: setup_feed's arguments (_feed_arguments) or a model's
                 `changefeed` config, exactly as the user wrote it;
    key_columns  the adapter's catalogue lookup macro, e.g. changefeed._postgres_key_columns;
    model        none for run-operations; for feed_post_hook the model being built
                 (_feed_model_context): it must be a model whose writes the feed records.
-#}
{% macro _feed_build_spec(relation, options, key_columns, model=none) %}
  {%- set options = changefeed._feed_options(options) -%}
  {%- if model is not none -%}
    {%- do changefeed._feed_model_rules(model, options) -%}
  {%- endif -%}
  {%- set source = changefeed._feed_relation(relation) -%}
  {%- set keys = key_columns(source, options['key']) -%}
  {%- set spec = changefeed._feed_spec(source, options, keys) -%}
  {%- do spec.update({'model': model}) -%}
  {{ return(spec) }}
{% endmacro %}


{#- setup_feed's and upgrade_feed's arguments as the raw options mapping (unset ones left out,
    so that their defaults and errors are _feed_options's, as for a model's config). -#}
{% macro _feed_arguments(mode, key, stall_timeout_ms, lock_probe_ms, capture, shard, row_image=none) %}
  {%- set raw = {'mode': mode} -%}
  {%- for name, value in [('key', key), ('stall_timeout_ms', stall_timeout_ms),
                          ('lock_probe_ms', lock_probe_ms), ('capture', capture), ('shard', shard),
                          ('row_image', row_image)] -%}
    {%- if value is not none -%}{%- do raw.update({name: value}) -%}{%- endif -%}
  {%- endfor -%}
  {{ return(raw) }}
{% endmacro %}


{#-
  Validates a feed's options (the model's `changefeed` config or setup_feed's arguments)
  and returns them normalised, with defaults filled in. Every error names the bad value
  and lists what is accepted.
-#}
{% macro _feed_options(raw) %}
  {%- set accepted_keys = ['mode', 'key', 'stall_timeout_ms', 'lock_probe_ms', 'capture', 'shard', 'row_image'] -%}
  {%- set accepted_modes = ['blocking', 'outbox'] -%}
  {%- set accepted_captures = ['none', 'trigger'] -%}
  {%- if raw is none or raw is not mapping -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed options must be a mapping such as {mode: outbox}, got: " ~ raw) }}
  {%- endif -%}
  {%- for name in raw -%}
    {%- if name not in accepted_keys -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: unknown option '" ~ name ~ "'; accepted options: " ~ accepted_keys | join(', ')) }}
    {%- endif -%}
  {%- endfor -%}

  {%- set mode = raw.get('mode') -%}
  {%- if mode not in accepted_modes -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: mode must be one of " ~ accepted_modes | join(', ') ~ "; got: " ~ mode) }}
  {%- endif -%}

  {%- set key = raw.get('key') -%}
  {%- if key is string -%}
    {%- set key = [key] -%}
  {%- endif -%}
  {%- if key is not none -%}
    {%- if key is mapping or key is not iterable or key | length == 0 -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: key must be a column name or a non-empty list of column names; got: " ~ key) }}
    {%- endif -%}
    {%- for column in key -%}
      {%- if column is not string or column | length == 0 -%}
        {{ exceptions.raise_compiler_error(
            "changefeed: every key column must be a non-empty string; got: " ~ column) }}
      {%- endif -%}
    {%- endfor -%}
    {%- if key | unique | list | length != key | length -%}
      {{ exceptions.raise_compiler_error("changefeed: key lists a column twice: " ~ key | join(', ')) }}
    {%- endif -%}
    {%- set key = key | list -%}
  {%- endif -%}

  {%- set stall_timeout_ms = changefeed._feed_positive_int(raw, 'stall_timeout_ms', 5000) -%}
  {%- set lock_probe_ms = changefeed._feed_positive_int(raw, 'lock_probe_ms', 20) -%}
  {%- if lock_probe_ms >= stall_timeout_ms -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: lock_probe_ms (" ~ lock_probe_ms ~ ") must be smaller than stall_timeout_ms ("
        ~ stall_timeout_ms ~ ")") }}
  {%- endif -%}

  {#- capture: trigger writes the outbox rows from a trigger on the source table, inside
      the writer's own statement (protocol section 5), so writers change nothing. -#}
  {%- set capture = raw.get('capture') if raw.get('capture') is not none else 'none' -%}
  {%- if capture not in accepted_captures -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: capture must be one of " ~ accepted_captures | join(', ') ~ "; got: " ~ capture) }}
  {%- endif -%}
  {%- if capture == 'trigger' and mode != 'outbox' -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: capture: trigger needs mode: outbox (blocking writers take the shard's lock"
        ~ " themselves); got mode: " ~ mode ~ ". Accepted for mode " ~ mode ~ ": capture: none") }}
  {%- endif -%}
  {%- set shard = raw.get('shard') -%}
  {%- if shard is not none and capture != 'trigger' -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: shard is the shard expression of capture: trigger; with capture: " ~ capture
        ~ " writers choose the shard of each outbox row themselves. Remove shard or set capture: trigger") }}
  {%- endif -%}
  {%- if capture == 'trigger' -%}
    {%- set shard = changefeed._feed_shard_expression(shard if shard is not none else '0') -%}
  {%- endif -%}

  {#- row_image: each event carries the source row as of its write (protocol 5.1, 9), so
      readers need not join back to the source and history is exact. -#}
  {%- set row_image = raw.get('row_image') if raw.get('row_image') is not none else false -%}
  {%- if row_image is not sameas true and row_image is not sameas false -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: row_image must be one of true, false (default false); got: " ~ row_image) }}
  {%- endif -%}

  {{ return({
      'mode': mode,
      'key': key,
      'stall_timeout_ms': stall_timeout_ms,
      'lock_probe_ms': lock_probe_ms,
      'capture': capture,
      'shard': shard,
      'row_image': row_image,
      'stated': changefeed._feed_stated(raw),
  }) }}
{% endmacro %}


{#- The option names `raw` gives a value (what the config states; the rest are defaults). -#}
{% macro _feed_stated(raw) %}
  {%- set stated = [] -%}
  {%- for name, value in raw.items() if value is not none -%}{%- do stated.append(name) -%}{%- endfor -%}
  {{ return(stated | sort) }}
{% endmacro %}


{#-
  setup_feed over a registered feed (protocol 10): an option the registered feed has and
  the new config would drop without naming it fails here, before anything changes.
  capture: trigger (its triggers would go, and the table's writes would have no events)
  and row images (events would stop carrying the row) are dropped only when the config
  says so: capture: none, row_image: false. `registered` is the registry's options.
-#}
{% macro _feed_check_stated_drops(spec, registered) %}
  {%- set unstated = [] -%}
  {%- if registered.get('capture') == 'trigger' and spec['capture'] != 'trigger' and 'capture' not in spec.get('stated', []) -%}
    {%- do unstated.append("capture: trigger (shard " ~ registered.get('shard') ~ "); pass capture: none"
        ~ " to drop the capture triggers (the table's writes then have events only where the"
        ~ " application writes outbox rows), or capture: trigger with shard: " ~ registered.get('shard')
        ~ " to keep them") -%}
  {%- endif -%}
  {%- if registered.get('row_image') and not spec['row_image'] and 'row_image' not in spec.get('stated', []) -%}
    {%- do unstated.append("row_image: true; pass row_image: false to stop events carrying the row,"
        ~ " or row_image: true to keep it") -%}
  {%- endif -%}
  {%- if unstated -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: setup_feed of " ~ spec['feed_id'] ~ " would drop what its arguments leave out,"
        ~ " so nothing was changed: " ~ unstated | join('. Also ')) }}
  {%- endif -%}
{% endmacro %}


{#- An option's value as the setup log shows it: true/false as in YAML, unset for none. -#}
{% macro _feed_option_text(value) %}
  {%- if value is none -%}{{ return('unset') }}{%- endif -%}
  {%- if value is sameas true or value is sameas false -%}{{ return(value | string | lower) }}{%- endif -%}
  {{ return(value | string) }}
{% endmacro %}


{#- What a setup changes in a registered feed's options, as `name old -> new` texts. -#}
{% macro _feed_option_changes(registered, options) %}
  {%- set changes = [] -%}
  {%- for name in (registered.keys() | list + options.keys() | list) | unique | sort -%}
    {%- if registered.get(name) != options.get(name) -%}
      {%- do changes.append(name ~ " " ~ changefeed._feed_option_text(registered.get(name)) ~ " -> "
                            ~ changefeed._feed_option_text(options.get(name))) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(changes) }}
{% endmacro %}


{% macro _feed_positive_int(raw, name, default) %}
  {%- set value = raw.get(name) -%}
  {%- if value is none -%}
    {{ return(default) }}
  {%- endif -%}
  {#- Both become int parameters and lock timeouts (SQL Server's sp_getapplock takes an int). -#}
  {%- if value is not integer or value is sameas true or value is sameas false or value < 1 or value > 2147483647 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: " ~ name ~ " must be a positive whole number of milliseconds below 2^31; got: " ~ value) }}
  {%- endif -%}
  {{ return(value) }}
{% endmacro %}


{#-
  Checks the shard expression of capture: trigger (a SQL expression over the source row's
  columns, e.g. `customer_id % 8`) and returns it trimmed. The expression is pasted into
  generated code that runs with the feed owner's rights, so it must stay one expression:
  no statement separator, no comment and no dollar quote or backslash escape anywhere
  (not even in a string), and parentheses that balance outside quoted text. Whether it
  names real columns and gives an integer is checked by the engine at setup, on the
  source table itself, before anything is created.
-#}
{% macro _feed_shard_expression(expression) %}
  {%- if expression is number and expression is not sameas true and expression is not sameas false -%}
    {%- set expression = expression | string -%}
  {%- endif -%}
  {%- if expression is not string or expression | trim | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: shard must be a SQL expression over the source row's columns, such as"
        ~ " \"customer_id % 8\" or 0; got: " ~ expression) }}
  {%- endif -%}
  {%- set expression = expression | trim -%}
  {%- for forbidden in [';', '--', '/*', '*/', '$', '\\'] -%}
    {%- if forbidden in expression -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: the shard expression may not contain " ~ forbidden ~ " (it must stay one"
          ~ " expression; forbidden anywhere: ; -- /* */ $ \\); got: " ~ expression) }}
    {%- endif -%}
  {%- endfor -%}
  {#- Parentheses outside '...', "..." and [...] must balance and never close more than
      they opened, so the expression cannot end the parenthesis it is wrapped in. -#}
  {%- set state = namespace(depth=0, quote=none, bad=false) -%}
  {%- for character in expression -%}
    {%- if state.quote is not none -%}
      {%- if character == state.quote -%}{%- set state.quote = none -%}{%- endif -%}
    {%- elif character == "'" or character == '"' -%}
      {%- set state.quote = character -%}
    {%- elif character == '[' -%}
      {%- set state.quote = ']' -%}
    {%- elif character == '(' -%}
      {%- set state.depth = state.depth + 1 -%}
    {%- elif character == ')' -%}
      {%- set state.depth = state.depth - 1 -%}
      {%- if state.depth < 0 -%}{%- set state.bad = true -%}{%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if state.bad or state.depth != 0 or state.quote is not none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the shard expression has unbalanced parentheses or an unclosed quote: " ~ expression) }}
  {%- endif -%}
  {{ return(expression) }}
{% endmacro %}


{#-
  Resolves what the user named as the source table into a Relation.
  Accepts a Relation (a model's `this`), a string "schema.table" or "database.schema.table",
  or a mapping {database?, schema, table} for names that themselves contain dots.
-#}
{% macro _feed_relation(relation) %}
  {#- A Relation first: dbt's Relation objects also pass `is mapping`. -#}
  {%- if relation is not none and relation is not string and relation.render is defined
        and relation.identifier is defined and relation.schema is defined -%}
    {{ return(relation) }}
  {%- elif relation is mapping -%}
    {%- if not relation.get('schema') or not relation.get('table') -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: relation as a mapping needs 'schema' and 'table' (and optionally 'database'); got: "
          ~ relation) }}
    {%- endif -%}
    {{ return(api.Relation.create(
        database=relation.get('database', target.database),
        schema=relation['schema'],
        identifier=relation['table'])) }}
  {%- elif relation is string -%}
    {%- set parts = relation.split('.') -%}
    {%- if parts | length == 2 and parts[0] and parts[1] -%}
      {{ return(api.Relation.create(database=target.database, schema=parts[0], identifier=parts[1])) }}
    {%- elif parts | length == 3 and parts[0] and parts[1] and parts[2] -%}
      {{ return(api.Relation.create(database=parts[0], schema=parts[1], identifier=parts[2])) }}
    {%- else -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: relation '" ~ relation ~ "' must be written schema.table or database.schema.table;"
          ~ " for names containing dots pass {schema: ..., table: ...}") }}
    {%- endif -%}
  {%- else -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: relation must be a Relation, 'schema.table' or {schema, table}; got: " ~ relation) }}
  {%- endif -%}
{% endmacro %}


{#-
  The feed spec: the single, adapter-neutral description of one feed from which every
  adapter generates its SQL (config -> spec -> generated SQL -> engine).
  `keys` comes from the adapter's catalogue lookup, so types and collations are the source's.
-#}
{% macro _feed_spec(relation, options, keys) %}
  {%- if keys is none or keys | length == 0 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed of " ~ relation ~ " has no key columns; set key: [column, ...]") }}
  {%- endif -%}
  {%- set spec = changefeed._feed_identity(relation) -%}
  {%- do changefeed._feed_check_block_bits(spec['block_bits']) -%}
  {%- do spec.update({
      'mode': options['mode'],
      'keys': keys,
      'stall_timeout_ms': options['stall_timeout_ms'],
      'lock_probe_ms': options['lock_probe_ms'],
      'capture': options['capture'],
      'shard': options['shard'],
      'row_image': options['row_image'],
      'stated': options['stated'],
  }) -%}
  {{ return(spec) }}
{% endmacro %}


{#- What names a feed and its objects, without mode or keys (all that teardown needs). -#}
{% macro _feed_identity(relation) %}
  {{ return({
      'feed_id': relation.schema ~ '.' ~ relation.identifier,
      'database': relation.database,
      'source_schema': relation.schema,
      'source_table': relation.identifier,
      'source_relation': relation.render(),
      'schema': var('changefeed_schema', 'changefeed'),
      'mode': none,
      'keys': none,
      'block_bits': 36,
      'protocol_version': changefeed._feed_protocol_version(),
  }) }}
{% endmacro %}


{#- BLOCK = 2^block_bits (protocol section 3): a block must hold more than a few ULIDs and
    leave bit 62 and the sign bit of ulid_low free. -#}
{% macro _feed_check_block_bits(bits) %}
  {%- if bits is not integer or bits is sameas true or bits is sameas false or bits < 8 or bits > 60 -%}
    {{ exceptions.raise_compiler_error("changefeed: block_bits must be a whole number in [8, 60]; got: " ~ bits) }}
  {%- endif -%}
{% endmacro %}


{#- Bumped whenever generated procedures change in a way that needs `upgrade_feed`. -#}
{% macro _feed_protocol_version() %}
  {{ return(3) }}
{% endmacro %}


{#-
  The name of one of a feed's objects: `kind:schema.table`, shortened deterministically
  when the engine's limit is exceeded (protocol section 9): the longest prefix of
  `schema.table` that fits, then `~` and the first 8 hex digits of md5(schema.table).
  unit is 'bytes' (PostgreSQL counts UTF-8 bytes) or 'utf16' (SQL Server's sysname counts
  UTF-16 code units, so a character outside the BMP, such as an emoji, counts twice).
  The prefix is built character by character, so a character is never split.
-#}
{% macro _feed_object_name(spec, kind, max_length, unit) %}
  {%- if unit not in ['bytes', 'utf16'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: name length unit must be 'bytes' or 'utf16'; got: " ~ unit) }}
  {%- endif -%}
  {%- set full = kind ~ ':' ~ spec['feed_id'] -%}
  {%- if changefeed._feed_name_length(full, unit) <= max_length -%}
    {{ return(full) }}
  {%- endif -%}
  {%- set suffix = '~' ~ local_md5(spec['feed_id'])[:8] -%}
  {%- set budget = max_length - changefeed._feed_name_length(kind ~ ':' ~ suffix, unit) -%}
  {%- if budget < 1 -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: object kind '" ~ kind ~ "' is too long for a " ~ max_length ~ "-" ~ unit ~ " name") }}
  {%- endif -%}
  {#- The longest prefix of the feed id that fits the budget: cut the encoded id at the
      budget and drop the character the cut split (a UTF-8 sequence or a surrogate pair),
      instead of measuring the prefix one character at a time. -#}
  {%- if unit == 'bytes' -%}
    {%- set prefix = spec['feed_id'].encode('utf-8')[:budget].decode('utf-8', 'ignore') -%}
  {%- else -%}
    {%- set prefix = spec['feed_id'].encode('utf-16-le')[:budget * 2].decode('utf-16-le', 'ignore') -%}
  {%- endif -%}
  {{ return(kind ~ ':' ~ prefix ~ suffix) }}
{% endmacro %}


{% macro _feed_name_length(name, unit) %}
  {%- if unit == 'bytes' -%}
    {{ return(name.encode('utf-8') | length) }}
  {%- endif -%}
  {{ return((name.encode('utf-16-le') | length) // 2) }}
{% endmacro %}


{#-
  The routines of a feed that every adapter has (protocol section 9), for a mode (none:
  both modes'), in the order setup creates them. The one list of them:
  each adapter creates the routine of kind X with its macro _<adapter>_routine_X
  (_feed_routine_macro), and adds only the routines its database needs besides
  (_postgres_routine_kinds, _sqlserver_routine_kinds). A feed's objects are named by
  kind in both adapters' contexts (`n`) with the same keys: these kinds, the tables
  (`state`, `feed`, `outbox`, ...), their primary keys `<table>_pk`, `outbox_txid` (the
  outbox's txid index), `outbox_hint` (its time_hint check) and the roles `writer_role`
  and `reader_role`.
-#}
{% macro _feed_routine_kinds(mode) %}
  {%- set kinds = ['release', 'lock', 'update_state', 'ulid', 'guard'] if mode != 'outbox' else [] -%}
  {{ return(kinds + ['read_feed', 'safe_point', 'tombstone', 'barrier_acquire', 'barrier_check', 'shards',
                     'retain', 'save_cursor', 'forget_consumer', 'snapshot_begin', 'snapshot_finish']) }}
{% endmacro %}


{#- The feed's tables (protocol section 9), every mode's, in the order teardown drops them. -#}
{% macro _feed_table_kinds() %}
  {{ return(['outbox', 'feed', 'session', 'incident', 'state', 'retention', 'consumer', 'snapshot']) }}
{% endmacro %}


{#- The macro that generates an adapter's routine of a kind: _<adapter>_routine_<kind>. -#}
{% macro _feed_routine_macro(adapter, kind) %}
  {%- set generate = changefeed.get('_' ~ adapter ~ '_routine_' ~ kind) -%}
  {%- if generate is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: _" ~ adapter ~ "_routine_kinds lists the routine '" ~ kind ~ "' but there is no macro"
        ~ " _" ~ adapter ~ "_routine_" ~ kind ~ " to generate it; add that macro or remove the kind") }}
  {%- endif -%}
  {{ return(generate) }}
{% endmacro %}


{#- apply_retention's arguments (protocol 8.1): max_age_seconds and keep_last whole numbers
    >= 0, at least one of them; override_consumers a boolean; shard none or an integer. -#}
{% macro _feed_retention_policy_check(max_age_seconds, keep_last, override_consumers, shard) %}
  {%- for name, value in [('max_age_seconds', max_age_seconds), ('keep_last', keep_last)] -%}
    {%- if value is not none and (value is not integer or value is sameas true or value is sameas false or value < 0) -%}
      {{ exceptions.raise_compiler_error(
          "changefeed: apply_retention's " ~ name ~ " must be a whole number of at least 0 (or left out); got: " ~ value) }}
    {%- endif -%}
  {%- endfor -%}
  {%- if max_age_seconds is none and keep_last is none -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention needs a policy: max_age_seconds (remove events older than this),"
        ~ " keep_last (keep the newest N events of each shard), or both (an event either keeps is kept)") }}
  {%- endif -%}
  {%- if override_consumers is not sameas true and override_consumers is not sameas false -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention's override_consumers must be true or false; got: " ~ override_consumers) }}
  {%- endif -%}
  {%- if shard is not none and (shard is not integer or shard is sameas true or shard is sameas false) -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: apply_retention's shard must be an integer (or left out for every shard); got: " ~ shard) }}
  {%- endif -%}
{% endmacro %}


{#- apply_retention's log: one line per shard of its result (every adapter's). -#}
{% macro _feed_retention_log(spec, result) %}
  {%- for r in result -%}
    {%- do log("changefeed: feed " ~ spec['feed_id'] ~ " shard " ~ r['shard_id'] ~ ": removed " ~ r['removed']
               ~ " event(s)" ~ (", horizon " ~ r['horizon'] if r['horizon'] else '')
               ~ (", " ~ r['held_for_consumers'] ~ " more kept for consumer " ~ r['slowest_consumer']
                  if r['held_for_consumers'] else ''), info=true) -%}
  {%- endfor -%}
{% endmacro %}
