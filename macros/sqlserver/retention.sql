{#-
  Retention (protocol section 8.1) is not implemented on SQL Server yet: its feeds keep
  every event. apply_retention fails with an error saying so, before any SQL runs.
-#}


{% macro sqlserver__apply_retention(relation, max_age_seconds, keep_last, override_consumers, shard) %}
  {{ changefeed._not_yet_supported('apply_retention', 'retention (docs/protocol.md section 8.1) is implemented on PostgreSQL only; SQL Server feeds keep every event') }}
{% endmacro %}
