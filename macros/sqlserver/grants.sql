{#-
  Permissions (protocol section 9). The writer may take the lock, number its rows and
  publish (blocking), or insert into the outbox (outbox); it reads nothing. The reader
  may read the feed (and the retention, consumer and snapshot tables, granted where they
  are created: retention.sql, snapshot.sql), call the reading procedures, register its
  cursor (save_cursor, forget_consumer) and request and finish snapshots (snapshot_begin,
  snapshot_finish); it writes nothing directly. retain, which removes
  events, is the owner's only. The
  procedures reach the tables through ownership chaining (same owner, same schema), so
  no table permission is needed for them, and nothing is granted to public.
-#}
{% macro _sqlserver_grants_statements(c) %}
  {%- set n = c.n -%}
  {%- set writer = [] -%}
  {%- if c.mode == 'blocking' -%}
    {%- do writer.append('grant execute on object::' ~ n.lock.sql) -%}
    {%- do writer.append('grant execute on object::' ~ n.update_state.sql) -%}
    {%- do writer.append('grant execute on object::' ~ n.release.sql) -%}
    {%- do writer.append('grant execute on object::' ~ n.ulid.sql) -%}
    {%- do writer.append('grant insert on object::' ~ n.feed.sql) -%}
  {%- else -%}
    {%- do writer.append('grant insert on object::' ~ n.outbox.sql) -%}
  {%- endif -%}
  {%- do writer.append('grant update on object::' ~ n.sequence.sql) -%}
  {%- set reader = [
      'grant select on object::' ~ n.feed.sql,
      'grant execute on object::' ~ n.read_feed.sql,
      'grant execute on object::' ~ n.safe_point.sql,
      'grant execute on object::' ~ n.tombstone.sql,
      'grant execute on object::' ~ n.barrier_acquire.sql,
      'grant execute on object::' ~ n.barrier_check.sql,
      'grant execute on object::' ~ n.shards.sql,
      'grant execute on object::' ~ n.save_cursor.sql,
      'grant execute on object::' ~ n.forget_consumer.sql,
      'grant execute on object::' ~ n.snapshot_begin.sql,
      'grant execute on object::' ~ n.snapshot_finish.sql,
      'grant execute on type::' ~ n.read_type.sql,
  ] -%}
  {#- read_feed reaches capture_check by ownership chaining; granted too, so that a reader
      (changefeed status) can ask whether capture is lost. -#}
  {%- if c.capture == 'trigger' -%}
    {%- do reader.append('grant execute on object::' ~ n.capture_check.sql) -%}
  {%- endif -%}
  {%- set statements = [] -%}
  {#- Through sp_executesql too, so that each resolves its object when it runs, after the
      creates earlier in the same batch. -#}
  {%- for grant in writer -%}
    {%- do statements.append(changefeed._sqlserver_exec(grant ~ ' to ' ~ n.writer_role.sql)) -%}
  {%- endfor -%}
  {%- for grant in reader -%}
    {%- do statements.append(changefeed._sqlserver_exec(grant ~ ' to ' ~ n.reader_role.sql)) -%}
  {%- endfor -%}
  {{ return(statements) }}
{% endmacro %}
