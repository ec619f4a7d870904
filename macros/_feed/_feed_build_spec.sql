{#-
  The adapter-neutral first half of setup/upgrade: validate the options, resolve the
  relation, ask the adapter for the key columns, and build the spec.
  key_columns is the adapter's catalogue lookup macro, e.g. changefeed._postgres_key_columns.
-#}
{% macro _feed_build_spec(relation, mode, key, stall_timeout_ms, lock_probe_ms, key_columns, capture=none, shard=none) %}
  {%- set raw = {'mode': mode} -%}
  {%- if key is not none -%}{%- do raw.update({'key': key}) -%}{%- endif -%}
  {%- if stall_timeout_ms is not none -%}{%- do raw.update({'stall_timeout_ms': stall_timeout_ms}) -%}{%- endif -%}
  {%- if lock_probe_ms is not none -%}{%- do raw.update({'lock_probe_ms': lock_probe_ms}) -%}{%- endif -%}
  {%- if capture is not none -%}{%- do raw.update({'capture': capture}) -%}{%- endif -%}
  {%- if shard is not none -%}{%- do raw.update({'shard': shard}) -%}{%- endif -%}
  {%- set options = changefeed._feed_options(raw) -%}
  {%- set source = changefeed._feed_relation(relation) -%}
  {%- set keys = key_columns(source, options['key']) -%}
  {{ return(changefeed._feed_spec(source, options, keys)) }}
{% endmacro %}
