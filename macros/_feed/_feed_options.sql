{#-
  Validates a feed's options (the model's `changefeed` config or setup_feed's arguments)
  and returns them normalised, with defaults filled in. Every error names the bad value
  and lists what is accepted.
-#}
{% macro _feed_options(raw) %}
  {%- set accepted_keys = ['mode', 'key', 'stall_timeout_ms', 'lock_probe_ms', 'capture', 'shard'] -%}
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

  {{ return({
      'mode': mode,
      'key': key,
      'stall_timeout_ms': stall_timeout_ms,
      'lock_probe_ms': lock_probe_ms,
      'capture': capture,
      'shard': shard,
  }) }}
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
