{#-
  DDL of a feed's sequence and its state, feed, session, incident and (outbox mode)
  outbox tables (protocol sections 3-6, objects in section 9).
-#}


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
  ' ~ ctx['key_defs'] ~ ',
  constraint ' ~ ident(n['feed_pk']) ~ ' primary key (shard_id, ulid)
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
  {{ ctx['key_defs'] }},
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
