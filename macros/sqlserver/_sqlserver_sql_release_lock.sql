{#-
  T-SQL fragment: give back the shard lock named @name (every hold of it, in case it was
  taken twice) and forget this connection's write on the feed.
-#}
{% macro _sqlserver_sql_release_lock(c, depth=0) -%}
{%- set p = ' ' * depth -%}
if @name is not null
{{ p }}    while applock_mode(N'public', @name, N'Session') <> N'NoLock'
{{ p }}        exec sp_releaseapplock @Resource = @name, @LockOwner = N'Session', @DbPrincipal = N'public';
{{ p }}exec sp_set_session_context @key = {{ c.key_u }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_w }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_s }}, @value = null;
{{ p }}exec sp_set_session_context @key = {{ c.key_n }}, @value = null;
{%- endmacro %}
