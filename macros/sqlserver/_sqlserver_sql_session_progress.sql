{#-
  T-SQL fragment: a fingerprint of shard @shard_id's session rows, read without waiting
  (dirty), into the varbinary variable `into`. Every lock call writes a new write_id and
  started_at, every update_state and release a new state and ended_at, so any writer
  activity on the shard changes it (protocol 4.2, progress()).
-#}
{% macro _sqlserver_sql_session_progress(c, into, depth=0) -%}
{%- set p = ' ' * depth -%}
select {{ into }} =
{{ p }}    convert(binary(4), count(*))
{{ p }}    + convert(binary(4), isnull(checksum_agg(binary_checksum(write_id, state)), 0))
{{ p }}    + convert(binary(9), isnull(max(started_at), '0001-01-01'))
{{ p }}    + convert(binary(9), isnull(max(ended_at), '0001-01-01'))
{{ p }}from {{ c.n.session.sql }} with (readuncommitted)
{{ p }}where shard_id = @shard_id;
{%- endmacro %}
