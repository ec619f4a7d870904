{#-
  The one compiler error of every default__ implementation: the macro, the adapter in use,
  the adapters that implement it and, where one exists, what to use instead. `family` names
  the macro's group, which decides the supported adapters:

    feed       setup_feed, upgrade_feed, teardown_feed      postgres, sqlserver
    consumer   feed_events, feed_cursor, publish_feed, ...  spark
    ulid       ulid_to_string, ulid_from_string, ...        spark, postgres, sqlserver

    {{ changefeed._unsupported_adapter('feed_events', 'consumer') }}
-#}
{% macro _unsupported_adapter(macro_name, family) %}
  {%- set families = {
      'feed': [['postgres', 'sqlserver'], none],
      'consumer': [['spark (and databricks)'],
                   'PostgreSQL and SQL Server consumers read with read_feed:<feed> (docs/protocol.md section 8)'],
      'ulid': [['spark (and databricks)', 'postgres', 'sqlserver'], none],
  } -%}
  {%- set supported, instead = families[family] -%}
  {{ exceptions.raise_compiler_error(
      "changefeed." ~ macro_name ~ " does not support the '" ~ adapter.type() ~ "' adapter;"
      ~ " supported adapters: " ~ supported | join(', ')
      ~ (". " ~ instead if instead else "")) }}
{% endmacro %}


{#- The error of a public macro that an adapter of its family does not implement yet:
    the macro, the adapter and why, so that nothing runs half-way.

    {{ changefeed._not_yet_supported('apply_retention', 'retention is implemented on PostgreSQL only') }}
-#}
{% macro _not_yet_supported(macro_name, reason) %}
  {{ exceptions.raise_compiler_error(
      "changefeed." ~ macro_name ~ " is not supported on the '" ~ adapter.type() ~ "' adapter yet: "
      ~ reason ~ ". Run it on a PostgreSQL feed, or follow the project's issue tracker for this adapter") }}
{% endmacro %}
