{#-
  The shape of a state consumer in the catalog (docs/spark.md "Current state and history";
  docs/protocol.md 11.8): where its state lives and what the model's name holds.

    deletes      parquet_layout   the model                        the state (tombstones included)
    tombstone    rewrite          the state table                  the model
    tombstone    layers           a view resolving the layers      <model>__changefeed_layers
    remove       rewrite          a view of the rows not deleted   the table <model>__changefeed_state
    remove       layers           a view of the rows not deleted   the view <model>__changefeed_state
                                                                   over its layers

  The state keeps its tombstones in every shape: S1 needs them (an older event of a deleted
  key, from a shard that was behind, must lose to the delete, not bring the key back). The
  cursor is always <model>__changefeed_cursor, so feed_events(feed, this) and retention find
  it by the model's name. A shape is fixed for the model's life; changing it needs a
  --full-refresh, which drops every relation of the old shape.
-#}

{#- The relation the phases apply events to: the model's table, or, when deletes='remove'
    hides the tombstones behind a view, <model>__changefeed_state. -#}
{% macro _spark_scd_state_relation(rules) %}
  {{ return(changefeed._spark_scd_removed_state() if rules.deletes == 'remove'
            else this.incorporate(type='table')) }}
{% endmacro %}


{% macro _spark_scd_removed_state() %}
  {{ return(changefeed._spark_scd_helper_relation(this.incorporate(type='table'), '__changefeed_state')) }}
{% endmacro %}


{#- The shape the rules ask for, and the one the catalog holds (none before the first run):
    'table', 'layers', 'remove' or 'remove, layers'. Views are looked for in every catalog:
    Spark's own lists views among its tables, and Iceberg's lists none where it holds none. -#}
{% macro _spark_scd_wanted_shape(rules) %}
  {%- set shape = 'layers' if rules.layout == 'layers' else 'table' -%}
  {%- if rules.deletes == 'remove' -%}
    {{ return('remove, layers' if shape == 'layers' else 'remove') }}
  {%- endif -%}
  {{ return(shape) }}
{% endmacro %}


{% macro _spark_scd_built_shape(state_name) %}
  {%- set helper = changefeed._spark_scd_relation_kind(state_name) -%}
  {%- if helper is not none -%}
    {{ return('remove, layers' if helper == 'view' else 'remove') }}
  {%- endif -%}
  {%- set kind = changefeed._spark_scd_relation_kind(this) -%}
  {{ return(none if kind is none else ('layers' if kind == 'view' else 'table')) }}
{% endmacro %}


{#- 'view', 'table' or none: what the catalog holds under the relation's name. -#}
{% macro _spark_scd_relation_kind(relation) %}
  {%- set like = " in " ~ relation.schema ~ " like '" ~ relation.identifier ~ "'" -%}
  {%- if run_query('show views' ~ like).rows | length > 0 -%}{{ return('view') }}{%- endif -%}
  {%- if run_query('show tables' ~ like).rows | length > 0 -%}{{ return('table') }}{%- endif -%}
  {{ return(none) }}
{% endmacro %}


{#- Fails, before any statement, when the model was built in another shape and this is not
    a full refresh, naming both shapes and the fix. -#}
{% macro _spark_scd_check_shape(wanted, built) %}
  {%- set described = {
      'table': 'as a table',
      'layers': "with parquet_layout='layers' (a view over its layers)",
      'remove': "with deletes='remove' (a view over " ~ this.identifier ~ "__changefeed_state)",
      'remove, layers': "with deletes='remove' and parquet_layout='layers' (a view over "
                        ~ this.identifier ~ "__changefeed_state)"} -%}
  {%- set now = {
      'table': 'to be a table',
      'layers': "with parquet_layout='layers'",
      'remove': "with deletes='remove'",
      'remove, layers': "with deletes='remove' and parquet_layout='layers'"} -%}
  {%- if built is not none and built != wanted -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' was built " ~ described[built] ~ " and is now configured "
        ~ now[wanted] ~ "; set " ~ ('deletes' if ('remove' in built) != ('remove' in wanted) else 'parquet_layout')
        ~ " back or rebuild with dbt run --full-refresh") }}
  {%- endif -%}
{% endmacro %}


{#- deletes='remove' makes the model a view; refuse a current catalog that holds none
    (Iceberg's Hadoop catalog) before any statement rather than after the state is built. -#}
{% macro _spark_scd_check_views(materialization) %}
  {%- set catalog = this.schema.split('.')[0] if '.' in this.schema
                    else run_query('select current_catalog()').rows[0][0] -%}
  {%- set setting = 'spark.sql.catalog.' ~ catalog -%}
  {#-- quoted: catalog-impl has a hyphen, which SET reads only between backquotes --#}
  {%- set implementation = run_query('set `' ~ setting ~ '`').rows[0][1] | string -%}
  {%- set type = run_query('set `' ~ setting ~ '.type`').rows[0][1] | string -%}
  {%- set custom = run_query('set `' ~ setting ~ '.catalog-impl`').rows[0][1] | string -%}
  {#-- Iceberg's SparkSessionCatalog keeps views in Spark's own catalog; its SparkCatalog
      over a Hadoop catalog has none --#}
  {%- if implementation == 'org.apache.iceberg.spark.SparkCatalog'
        and (type | lower == 'hadoop' or 'HadoopCatalog' in custom) -%}
    {{ exceptions.raise_compiler_error(
        "changefeed: model '" ~ model.name ~ "' (materialized='" ~ materialization ~ "'): deletes='remove'"
        ~ " makes the model a view of the rows that are not deleted, and its catalog '" ~ catalog
        ~ "' (Iceberg's Hadoop catalog) holds no views; keep deletes='tombstone' and read the model"
        ~ " where not changefeed_deleted, or build it in a catalog that holds views (an Iceberg REST"
        ~ " catalog, or file_format='delta' in Spark's own)") }}
  {%- endif -%}
{% endmacro %}


{#- The model as a view of the state's rows that are not deletes, with the select's
    columns (history: and valid_from, valid_to). Re-created by every run: one metastore
    call, and the select's columns are the run's. -#}
{% macro _spark_scd_point_visible_view(materialization, state, columns) %}
  {%- set shown = columns + (['valid_from', 'valid_to'] if materialization == 'changefeed_history' else []) -%}
  {%- do run_query('create or replace view ' ~ this.incorporate(type='view') ~ ' as select '
      ~ changefeed._spark_scd_list(shown) ~ ' from ' ~ state ~ ' where not changefeed_deleted') -%}
{% endmacro %}
