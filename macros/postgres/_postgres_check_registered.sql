{#-
  Compares a feed's registry row with the requested spec (protocol section 10, D1) and
  raises a compiler error naming the difference and the remedy when the mode or the key
  changed, or when the protocol versions differ (operation 'setup'; 'upgrade' accepts an
  older registered version). Returns true when the options are unchanged too.
-#}
{% macro _postgres_check_registered(spec, row, signature, options, operation) %}
  {%- set relation_arg = changefeed._postgres_relation_arg(spec) -%}
  {%- if row['mode'] != spec['mode'] or row['key_signature'] != signature -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " is registered with mode " ~ row['mode']
        ~ " and key (" ~ row['key_signature'] ~ "), but the config asks for mode " ~ spec['mode']
        ~ " and key (" ~ signature ~ "). A feed's mode and key cannot change in place: either keep"
        ~ " the registered mode and key, or run `dbt run-operation changefeed.teardown_feed --args"
        ~ " '{relation: " ~ relation_arg ~ "}'` (this drops the feed and its history) and set it up"
        ~ " again, or set up a new feed on another table.") }}
  {%- endif -%}
  {%- if row['protocol_version'] > spec['protocol_version'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up by a newer changefeed package (protocol version "
        ~ row['protocol_version'] ~ "; this package has " ~ spec['protocol_version'] ~ "); upgrade the package") }}
  {%- endif -%}
  {%- if operation == 'setup' and row['protocol_version'] < spec['protocol_version'] -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: the feed " ~ spec['feed_id'] ~ " was set up with protocol version " ~ row['protocol_version']
        ~ " and this package has version " ~ spec['protocol_version'] ~ "; run `dbt run-operation"
        ~ " changefeed.upgrade_feed --args '{relation: " ~ relation_arg ~ ", mode: " ~ spec['mode'] ~ "}'`") }}
  {%- endif -%}
  {{ return(row['options'] == options) }}
{% endmacro %}
