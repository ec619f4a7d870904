{#-
  DDL of a feed's sequence and its state, feed, session, incident and (outbox mode)
  outbox tables (protocol sections 3-6, objects in section 9).
-#}


{#- PL/pgSQL for setup and upgrade: add the constraints a feed set up by an older package
    lacks (the feed table's `octet_length(ulid) = 16` check). Adding it reads the whole feed
    table once, under its lock; a row that is not 16 bytes fails the setup with the
    constraint's name (delete that row: no reader can ever pass it). -#}
{% macro _postgres_sql_constraints_sync(ctx) %}
  if not exists (select 1 from pg_catalog.pg_constraint as k
                  where k.conrelid = pg_catalog.to_regclass({{ changefeed._postgres_literal(ctx['q']['feed']) }})
                    and k.conname = {{ changefeed._postgres_literal(ctx['n']['feed_ulid']) }}) then
    execute {{ changefeed._postgres_literal('alter table ' ~ ctx['q']['feed'] ~ ' add constraint '
                ~ changefeed._postgres_ident(ctx['n']['feed_ulid']) ~ ' check (pg_catalog.octet_length(ulid) = 16)') }};
  end if;
{%- endmacro %}


{#- What setup must add to the feed's tables, as phrases for its log: the feed table's ULID
    check, and (blocking) its guard trigger. Empty when nothing is missing. -#}
{% macro _postgres_constraints_missing(ctx) %}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set found = changefeed._postgres_query_json(
      "select pg_catalog.json_build_object('check', (select pg_catalog.count(*) from pg_catalog.pg_constraint as k"
      ~ " where k.conrelid = pg_catalog.to_regclass(" ~ lit(ctx['q']['feed']) ~ ")"
      ~ " and k.conname = " ~ lit(ctx['n']['feed_ulid']) ~ "), 'guard', (select pg_catalog.count(*)"
      ~ " from pg_catalog.pg_trigger as t where t.tgrelid = pg_catalog.to_regclass(" ~ lit(ctx['q']['feed']) ~ ")"
      ~ " and t.tgname = " ~ lit(ctx['n'].get('guard', '')) ~ "))") -%}
  {%- set missing = [] -%}
  {%- if found['check'] == 0 -%}
    {%- do missing.append("added the check that every ULID of the feed table is 16 bytes") -%}
  {%- endif -%}
  {%- if ctx['mode'] == 'blocking' and found['guard'] == 0 -%}
    {%- do missing.append("added the guard trigger that keeps each write's rows in its shard and block") -%}
  {%- endif -%}
  {{ return(missing) }}
{% endmacro %}


{#- In creation order: the outbox's order_sequence default reads the sequence. -#}
{% macro _postgres_tables_statements(ctx) %}
  {%- set q = ctx['q'] -%}
  {%- set n = ctx['n'] -%}
  {%- set ident = changefeed._postgres_ident -%}
  {%- set statements = [] -%}
  {%- do statements.append('create sequence ' ~ q['sequence'] ~ ' as bigint cache 1 no cycle') -%}
  {%- do statements.append('create table ' ~ q['state'] ~ ' (
  shard_id integer not null,
  time_ms bigint not null,
  ulid_high bytea not null,
  ulid_low bigint not null,
  generation bigint not null,
  constraint ' ~ ident(n['state_pk']) ~ ' primary key (shard_id)
)') -%}
  {%- do statements.append('create table ' ~ q['feed'] ~ ' (
  shard_id integer not null,
  ulid bytea not null,
  ' ~ ctx['key_defs'] ~ ',' ~ changefeed._postgres_row_image_defs(ctx) ~ '
  constraint ' ~ ident(n['feed_pk']) ~ ' primary key (shard_id, ulid),
  constraint ' ~ ident(n['feed_ulid']) ~ ' check (pg_catalog.octet_length(ulid) = 16)
)') -%}
  {%- do statements.append('create table ' ~ q['session'] ~ ' (
  shard_id integer not null,
  session_id integer not null,
  write_id bigint not null,
  state smallint not null,
  generation bigint not null,
  time_ms bigint not null,
  ulid_high bytea not null,
  block_start bigint not null,
  first_ulid bytea not null,
  before_ulid bytea not null,
  expected_time_ms bigint not null,
  expected_high bytea not null,
  expected_low bigint not null,
  started_at timestamptz not null,
  finished_at timestamptz,
  constraint ' ~ ident(n['session_pk']) ~ ' primary key (shard_id, session_id)
)') -%}
  {%- do statements.append('create table ' ~ q['incident'] ~ ' (
  shard_id integer not null,
  generation bigint not null,
  detected_at timestamptz not null,
  reason text not null,
  holder_session_id integer,
  holder_write_id bigint,
  waited_ms bigint
)') -%}
  {%- if ctx['mode'] == 'outbox' -%}
    {%- set outbox_sql -%}
create table {{ q['outbox'] }} (
  shard_id integer not null,
  order_sequence bigint not null default pg_catalog.nextval({{ ctx['lit_sequence'] }}::pg_catalog.regclass),
  txid xid8 not null default pg_catalog.pg_current_xact_id(),
  time_hint timestamptz not null default pg_catalog.now(),
  {{ ctx['key_defs'] }},{{ changefeed._postgres_row_image_defs(ctx) }}
  constraint {{ ident(n['outbox_pk']) }} primary key (shard_id, order_sequence),
  constraint {{ ident(n['outbox_hint']) }} check (time_hint >= '1970-01-01 00:00:00+00'::timestamptz
    and time_hint < '10889-08-02 05:31:50.656+00'::timestamptz)
)
    {%- endset -%}
    {%- do statements.append(outbox_sql) -%}
    {%- do statements.append('create index ' ~ ident(n['outbox_txid']) ~ ' on ' ~ q['outbox'] ~ ' (shard_id, txid)') -%}
  {%- endif -%}
  {{ return(statements) }}
{% endmacro %}


{#- row_image (protocol 9, invariant O7): the columns of the feed and outbox tables that carry
    the source row as of the event. row_deleted tells the three cases apart: false with the
    image (the row after an insert or update), true for a delete (no row), null for an
    event without an image (written before row_image was on, or by a writer that passed
    none), which readers join back to the source for. Empty without row_image, so the DDL
    of other feeds is unchanged. -#}
{% macro _postgres_row_image_defs(ctx) %}
  {%- if not ctx['row_image'] -%}{{ return('') }}{%- endif -%}
  {{ return('\n  ' ~ (changefeed._postgres_row_image_columns() + [changefeed._postgres_row_image_check()]) | join(',\n  ') ~ ',') }}
{% endmacro %}


{% macro _postgres_row_image_columns() %}
  {{ return(['row_image jsonb', 'row_deleted boolean']) }}
{% endmacro %}


{% macro _postgres_row_image_check() %}
  {{ return('check (case row_deleted when false then row_image is not null else row_image is null end)') }}
{% endmacro %}


{#- PL/pgSQL for setup and upgrade: row_image switched on in place (D1) adds the columns to
    the feed and outbox tables (nullable, no default: a catalogue change, no rewrite), and
    lets outbox writers insert them. Existing events keep a null row_deleted: no image.
    Switched off, the columns stay (the events that have images keep them). -#}
{% macro _postgres_sql_row_image_sync(ctx) %}
  {%- if not ctx['row_image'] -%}{{ return('') }}{%- endif -%}
  {%- set lit = changefeed._postgres_literal -%}
  {%- set additions = 'add column ' ~ changefeed._postgres_row_image_columns() | join(', add column ')
      ~ ', add ' ~ changefeed._postgres_row_image_check() -%}
  {%- set lines = [] -%}
  {%- for kind in ['feed', 'outbox'] if kind in ctx['q'] -%}
    {%- set alter = 'alter table ' ~ ctx['q'][kind] ~ ' ' ~ additions -%}
    {%- set grant = ('; grant insert (row_image, row_deleted) on ' ~ ctx['q']['outbox'] ~ ' to '
        ~ changefeed._postgres_ident(ctx['n']['writer_role'])) if kind == 'outbox' else '' -%}
    {%- do lines.append('  if not exists (select 1 from pg_catalog.pg_attribute as a where a.attrelid = pg_catalog.to_regclass('
        ~ lit(ctx['q'][kind]) ~ ") and a.attname = 'row_deleted' and not a.attisdropped) then\n    execute "
        ~ lit(alter) ~ ';' ~ ('\n    execute ' ~ lit(grant[2:]) ~ ';' if grant else '') ~ '\n  end if;') -%}
  {%- endfor -%}
  {#- A line of its own after the constraints' sync; nothing at all without row_image, so
      the setup statement of other feeds is unchanged. -#}
  {{ return('\n' ~ lines | join('\n')) }}
{% endmacro %}
