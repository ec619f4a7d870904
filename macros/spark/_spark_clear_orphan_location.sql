{#-
  Deletes the managed location of a table that is NOT in the catalog (docs/protocol.md
  11.5). A killed `create table ... as select` leaves files there, after which Spark
  refuses to create the table (LOCATION_ALREADY_EXISTS) until someone deletes them.
  There is no SQL to delete a directory, but dropping a managed table deletes its
  location: so a throw-away managed table is pointed at the location and dropped.
  The truncate in between empties the location and creates it if it is missing (the
  usual case, a clean first run): dropping a table whose location does not exist makes
  the metastore log a FileNotFoundException and "ERROR FileUtils: Failed to delete".
  Idempotent, and safe to kill at any point (a re-run repeats it). It refuses a table
  that the schema's listing shows (below).
-#}
{% macro _spark_clear_orphan_location(relation) %}
  {#-- The caller found no such relation, but a metastore that failed to answer reads as
       "no such table" too (Hive reports a database it could not read as missing), and
       dbt's relation cache does not see a table created since the run began. Only
       a listing of the schema without the table lets its location go: a listing that
       fails stops the run, and one that shows the table stops it before anything is
       deleted. --#}
  {%- if changefeed._spark_table_listed(relation) -%}
    {{ exceptions.raise_compiler_error("changefeed: " ~ relation ~ " was looked up as missing, but its schema lists it (the metastore failed to answer, or another process created it meanwhile): its location was not cleared and nothing was written; run again") }}
  {%- endif -%}
  {%- set location = changefeed._spark_schema_location(relation.schema) -%}
  {%- set cleanup = api.Relation.create(
      database=relation.database, schema=relation.schema,
      identifier=(relation.identifier | lower) ~ '__changefeed_cleanup', type='table') -%}
  {%- set path = location.rstrip('/') ~ '/' ~ (relation.identifier | lower) -%}
  {%- do log("changefeed: clearing the location " ~ path ~ " of " ~ relation ~ " (not in the catalog) before creating it") -%}
  {%- do run_query('create table if not exists ' ~ cleanup ~ ' (x int) using parquet') -%}
  {%- do run_query("alter table " ~ cleanup ~ " set location '" ~ path | replace("'", "\\'") ~ "'") -%}
  {%- do run_query('truncate table ' ~ cleanup) -%}
  {%- do run_query('drop table if exists ' ~ cleanup) -%}
{% endmacro %}
