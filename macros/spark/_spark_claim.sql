{#-
  One writer per model (docs/spark.md, "One run of a model at a time"; docs/protocol.md
  11.10, W1). A run of a consumer or state model holds a claim on the model before it reads
  its cursor, so that two concurrent `dbt run`s of one model never both write it: the
  second fails at once, in one line naming the holder.

  A claim is a view in Spark's session catalog, spark_catalog.<claim schema> (var
  changefeed_claim_schema, default changefeed_claims), named <key>__g<N>: N counts the
  model's claims, and the view's query holds the holder (dbt invocation, host, process id,
  time, connection method). Creating a view is atomic in the metastore, which is what two
  runs share (the shared catalog's PostgreSQL, or a Hive metastore service).

    take      list the model's claims; the newest, N, must be released (a view
              <key>__g<N>_released exists), or its holder dead; then create <key>__g<N+1>
              if it does not exist, read it back (someone else may have created it first),
              and list again: a claim above N+1 means a slower taker saw an old list, so
              ours yields. Older claims are dropped; the newest is never dropped, so a
              number is never handed out twice while someone could still act on it.
    release   create <key>__g<N>_released, if <key>__g<N> is this invocation's: at the end
              of a state model's run, and for every model of the run in the package's
              on-run-end hook (consumer models, and runs that failed).
    alive     a holder on this host: its process exists (ProcessHandle.of; for about 5 s,
              since a killed process stays listed until it is reaped); the same
              process as this run with method 'session' is an earlier invocation of this
              process (dbt runs one at a time in a process), so it is dead. A holder on
              another host, or one sharing this run's server (thrift, http, odbc):
              alive until changefeed_claim_timeout_minutes (default 60) after it was taken.
  var changefeed_claims: false takes none (a catalog where views cannot be created). A
  session whose catalog no other process can open (in memory, embedded Derby) takes none.
-#}

{#- Whether this render is a run that writes the model (not compile, show, test or a unit test). -#}
{% macro _spark_claim_applies() %}
  {#-- dbt-spark only: Databricks runs these macros through dispatch, but its warehouses
      refuse reflect(), which the claims need --#}
  {{ return(execute and adapter.type() == 'spark' and var('changefeed_claims', true)
            and (flags.WHICH or '') in ['run', 'build', 'retry']
            and model is defined and model.resource_type == 'model'
            and not changefeed._spark_in_unit_test() and changefeed._spark_claim_catalog_shared()) }}
{% endmacro %}


{#- Whether another process can run this model meanwhile: not when this session's catalog
    is its own, in memory or in an embedded Derby database, which admits one process (the
    metastore has been read by now, so an embedded Derby has booted); always through a
    server (thrift, http, odbc), whose clients share its catalog. -#}
{% macro _spark_claim_catalog_shared() %}
  {%- if (target.method | default('session', true)) != 'session' -%}{{ return(true) }}{%- endif -%}
  {%- if run_query('set spark.sql.catalogImplementation').rows[0][1] == 'in-memory' -%}
    {{ return(false) }}
  {%- endif -%}
  {{ return(run_query("select reflect('org.apache.derby.iapi.services.monitor.Monitor', 'getMonitor')")
            .rows[0][0] in [none, 'null']) }}
{% endmacro %}


{% macro _spark_claim_schema() %}
  {{ return('spark_catalog.' ~ adapter.quote(var('changefeed_claim_schema', 'changefeed_claims') | lower)) }}
{% endmacro %}


{#- The claim's name stem of a model: its schema (a catalog prefix included) and alias. -#}
{% macro _spark_claim_key(schema, identifier) %}
  {{ return(((schema ~ '__' ~ identifier) | lower | replace('.', '__') | replace('`', ''))) }}
{% endmacro %}


{% macro _spark_claim_schema_exists() %}
  {{ return(run_query("show schemas in spark_catalog like '"
      ~ var('changefeed_claim_schema', 'changefeed_claims') | lower ~ "'").rows | length > 0) }}
{% endmacro %}


{#- {generation: released} of the model's claims, from one listing. -#}
{% macro _spark_claim_generations(key) %}
  {%- set found = {} -%}
  {%- set stem = key ~ '__g' -%}
  {%- for row in run_query('show views in ' ~ changefeed._spark_claim_schema() ~ " like '" ~ stem ~ "*'").rows -%}
    {%- set rest = row[1][stem | length:] if row[1].startswith(stem) else '' -%}
    {%- set released = rest.endswith('_released') -%}
    {%- set number = rest[:-9] if released else rest -%}
    {%- if number.isdigit() -%}
      {%- do found.update({number | int: released or found.get(number | int, false)}) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(found) }}
{% endmacro %}


{% macro _spark_claim_holder(key, generation) %}
  {%- set row = run_query('select invocation_id, host, pid, claimed_at, method, model from '
      ~ changefeed._spark_claim_schema() ~ '.' ~ key ~ '__g' ~ generation).rows[0] -%}
  {{ return({'invocation_id': row[0], 'host': row[1], 'pid': row[2] | int, 'claimed_at': row[3] | int,
             'method': row[4], 'model': row[5]}) }}
{% endmacro %}


{#- This run: its host, process and the time, as the Spark driver sees them. -#}
{% macro _spark_claim_me() %}
  {%- set row = run_query("select reflect('java.net.InetAddress', 'getLocalHost'),"
      ~ " reflect('java.lang.ProcessHandle', 'current'), unix_timestamp()").rows[0] -%}
  {{ return({'invocation_id': invocation_id, 'host': row[0] | replace("'", ""), 'pid': row[1] | int, 'now': row[2] | int,
             'method': target.method | default('session', true)}) }}
{% endmacro %}


{#- Whether the holder may still be running (see alive above). -#}
{% macro _spark_claim_alive(holder, me) %}
  {%- set timeout = var('changefeed_claim_timeout_minutes', 60) | int * 60 -%}
  {%- set within_timeout = me.now < holder.claimed_at + timeout -%}
  {%- if holder.host != me.host -%}{{ return(within_timeout) }}{%- endif -%}
  {%- if holder.pid == me.pid -%}
    {{ return(false if me.method == 'session' else within_timeout) }}
  {%- endif -%}
  {#-- a killed process stays listed until its parent (init, for an orphaned JVM) reaps it,
      a second or two: it counts as dead if it is gone within about 5 s --#}
  {%- for attempt in range(11) -%}
    {%- set process = run_query("select reflect('java.lang.ProcessHandle', 'of', cast("
        ~ holder.pid ~ " as bigint))").rows[0][0] -%}
    {%- if process == 'Optional.empty' -%}{{ return(false) }}{%- endif -%}
    {%- if attempt < 10 -%}
      {%- do run_query("select reflect('java.lang.Thread', 'sleep', cast(500 as bigint))") -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(true) }}
{% endmacro %}


{% macro _spark_claim_refuse(holder, me) %}
  {%- set since = modules.datetime.datetime.fromtimestamp(holder.claimed_at, modules.pytz.utc)
                   .strftime('%Y-%m-%d %H:%M:%S') -%}
  {{ exceptions.raise_compiler_error(
      "changefeed: model '" ~ model.name ~ "' is being run by another dbt run (process " ~ holder.pid
      ~ " on " ~ holder.host ~ ", invocation " ~ holder.invocation_id ~ ", since " ~ since ~ " UTC), so"
      ~ " this run wrote nothing; run it again when that one has ended, or, if it is dead, release"
      ~ " its claim: dbt run-operation changefeed.release_claim --args '{model: " ~ model.name ~ "}'"
      ~ " (a holder this host cannot check lapses after changefeed_claim_timeout_minutes, "
      ~ var('changefeed_claim_timeout_minutes', 60) ~ ")") }}
{% endmacro %}


{#- Take the claim of the model being run (idempotent within an invocation). -#}
{% macro _spark_claim_take() %}
  {%- if not changefeed._spark_claim_applies() -%}{{ return(none) }}{%- endif -%}
  {%- set schema = changefeed._spark_claim_schema() -%}
  {%- set key = changefeed._spark_claim_key(this.schema, this.identifier) -%}
  {%- do run_query('create schema if not exists ' ~ schema) -%}
  {%- set generations = changefeed._spark_claim_generations(key) -%}
  {%- set newest = generations.keys() | max if generations else 0 -%}
  {%- set holder = changefeed._spark_claim_holder(key, newest) if newest > 0 else none -%}
  {%- if holder is not none and holder.invocation_id == invocation_id and not generations[newest] -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set me = changefeed._spark_claim_me() -%}
  {%- if newest > 0 -%}
    {%- if not generations[newest] and changefeed._spark_claim_alive(holder, me) -%}
      {%- do changefeed._spark_claim_refuse(holder, me) -%}
    {%- endif -%}
  {%- endif -%}
  {%- set mine = newest + 1 -%}
  {%- do run_query('create view if not exists ' ~ schema ~ '.' ~ key ~ '__g' ~ mine
      ~ " as select '" ~ invocation_id ~ "' as invocation_id, '" ~ me.host ~ "' as host, cast("
      ~ me.pid ~ ' as bigint) as pid, cast(' ~ me.now ~ " as bigint) as claimed_at, '"
      ~ me.method ~ "' as method, '" ~ model.unique_id ~ "' as model") -%}
  {%- set holder = changefeed._spark_claim_holder(key, mine) -%}
  {%- if holder.invocation_id != invocation_id -%}
    {%- do changefeed._spark_claim_refuse(holder, me) -%}
  {%- endif -%}
  {%- set now = changefeed._spark_claim_generations(key) -%}
  {%- set above = now.keys() | select('>', mine) | list -%}
  {%- if above -%}
    {#-- a taker that listed before ours was created holds a newer claim: ours yields --#}
    {%- do run_query('drop view if exists ' ~ schema ~ '.' ~ key ~ '__g' ~ mine) -%}
    {%- do changefeed._spark_claim_refuse(changefeed._spark_claim_holder(key, above | max), me) -%}
  {%- endif -%}
  {%- for older in now.keys() | select('<', mine) -%}
    {%- do run_query('drop view if exists ' ~ schema ~ '.' ~ key ~ '__g' ~ older ~ '_released') -%}
    {%- do run_query('drop view if exists ' ~ schema ~ '.' ~ key ~ '__g' ~ older) -%}
  {%- endfor -%}
{% endmacro %}


{#- Release the claim of schema.identifier if this invocation holds it; `force` releases
    whoever holds it (release_claim). Returns the holder released, or none. -#}
{% macro _spark_claim_release(schema, identifier, force=false) %}
  {%- set claims = changefeed._spark_claim_schema() -%}
  {%- set key = changefeed._spark_claim_key(schema, identifier) -%}
  {%- set generations = changefeed._spark_claim_generations(key) -%}
  {%- if not generations -%}{{ return(none) }}{%- endif -%}
  {%- set newest = generations.keys() | max -%}
  {%- if generations[newest] -%}{{ return(none) }}{%- endif -%}
  {%- set holder = changefeed._spark_claim_holder(key, newest) -%}
  {%- if not force and holder.invocation_id != invocation_id -%}{{ return(none) }}{%- endif -%}
  {%- do run_query('create view if not exists ' ~ claims ~ '.' ~ key ~ '__g' ~ newest ~ '_released'
      ~ ' as select 1 as released') -%}
  {{ return(holder) }}
{% endmacro %}


{#- Release the claim of the model being run, at the end of its materialization. -#}
{% macro _spark_claim_give_up() %}
  {%- if changefeed._spark_claim_applies() -%}
    {%- do changefeed._spark_claim_release(this.schema, this.identifier) -%}
  {%- endif -%}
{% endmacro %}


{#- The package's on-run-end hook: release every claim this invocation took, whether its
    model succeeded or failed. -#}
{% macro _spark_claim_release_run(results) %}
  {%- if adapter.type() != 'spark' or not var('changefeed_claims', true)
        or not changefeed._spark_claim_schema_exists() -%}
    {{ return(none) }}
  {%- endif -%}
  {%- for result in results or [] -%}
    {%- set node = result.node -%}
    {%- set state_model = node.resource_type == 'model'
        and node.config.materialized in ['changefeed_current_state', 'changefeed_history'] -%}
    {#-- a state model that succeeded released its claim itself --#}
    {%- if node.resource_type == 'model' and not (state_model and result.status == 'success') and (
          state_model
          or ('macro.changefeed.feed_batch' in node.depends_on.macros)
          or ('macro.changefeed.feed_cursor' in node.depends_on.macros)
          or ('macro.changefeed.feed_events' in node.depends_on.macros)) -%}
      {%- do changefeed._spark_claim_release(node.schema, node.alias or node.name) -%}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}
