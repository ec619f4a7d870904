{#-
  One writer per model (docs/spark.md, "One run of a model at a time"; docs/protocol.md
  11.10, W1). A run of a consumer or state model holds a claim on the model before it reads
  its cursor, so that two concurrent `dbt run`s of one model never both write it: the
  second fails at once, in one line naming the holder.

  Claims are views in Spark's session catalog, spark_catalog.<claim schema> (var
  changefeed_claim_schema, default changefeed_claims), which the runs share (the shared
  catalog's PostgreSQL, or a Hive metastore service). Each run writes only views of its own
  (named with its dbt invocation id), so no statement can fail because another run made
  the same name; who holds the model is decided as in Lamport's bakery, where each view
  is one process's register:

    take      create <key>__c_<run> (choosing); list the model's views; create
              <key>__t<n>_<run> (a ticket, n = 1 + the highest ticket listed, its query the
              holder: invocation, host, process id, time, connection method); drop the
              choosing view. Then list again: while another run is choosing, wait (up to
              about 3 s); a ticket (n', run') below (n, run), in that order, whose holder is
              alive means that run holds the model or is ahead of this one: drop ours and
              refuse; a dead holder's views are dropped. Otherwise this run holds it.
    release   drop this run's ticket: at the end of a state model's run, and for every
              model of the run in the package's on-run-end hook (consumer models, and runs
              that failed).
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


{% macro _spark_claim_schema_name() %}
  {{ return(var('changefeed_claim_schema', 'changefeed_claims') | lower) }}
{% endmacro %}


{% macro _spark_claim_schema() %}
  {{ return('spark_catalog.' ~ adapter.quote(changefeed._spark_claim_schema_name())) }}
{% endmacro %}


{#- The claim's name stem of a model: its schema (a catalog prefix included) and alias. -#}
{% macro _spark_claim_key(schema, identifier) %}
  {{ return(((schema ~ '__' ~ identifier) | lower | replace('.', '__') | replace('`', ''))) }}
{% endmacro %}


{% macro _spark_claim_schema_exists() %}
  {{ return(run_query("show schemas in spark_catalog like '" ~ changefeed._spark_claim_schema_name() ~ "'")
            .rows | length > 0) }}
{% endmacro %}


{#- The names of a run's views of the model whose key is `key`: its ticket number `number`,
    or, with none, its choosing view (_spark_claim_views parses them back). -#}
{% macro _spark_claim_view(key, run, number=none) %}
  {{ return(changefeed._spark_claim_schema() ~ '.' ~ key ~ ('__t' ~ number if number is not none else '__c')
            ~ '_' ~ run) }}
{% endmacro %}


{#- The model's views, from one listing with their holders (a view dropped meanwhile is
    not read again, which could fail): {'tickets': [(number, run, holder)], 'choosing':
    [(run, holder)]}; a run is a dbt invocation id's 32 hex digits. -#}
{% macro _spark_claim_views(key) %}
  {%- set found = {'tickets': [], 'choosing': []} -%}
  {%- set stem = key ~ '__' -%}
  {%- set name_re = modules.re.compile('^(?:c|t([0-9]+))_([0-9a-f]{32})$') -%}
  {%- set holder_re = modules.re.compile("View Original Text: select '([^']*)' as invocation_id, '([^']*)'"
      ~ " as host, cast[(]([0-9]+) as bigint[)] as pid, cast[(]([0-9]+) as bigint[)] as claimed_at,"
      ~ " '([^']*)' as method, '([^']*)' as model") -%}
  {%- set listing = run_query('show table extended in ' ~ changefeed._spark_claim_schema()
      ~ " like '" ~ stem ~ "*'") -%}
  {%- for row in listing.rows if row[1].startswith(stem) -%}
    {%- set name = name_re.match(row[1][stem | length:]) -%}
    {%- set text = holder_re.search(row[3]) -%}
    {%- if name and text -%}
      {%- set holder = {'invocation_id': text.group(1), 'host': text.group(2), 'pid': text.group(3) | int,
                        'claimed_at': text.group(4) | int, 'method': text.group(5), 'model': text.group(6)} -%}
      {%- if name.group(1) -%}
        {%- do found.tickets.append((name.group(1) | int, name.group(2), holder)) -%}
      {%- else -%}
        {%- do found.choosing.append((name.group(2), holder)) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(found) }}
{% endmacro %}


{#- This run's name in its views. -#}
{% macro _spark_claim_run() %}
  {{ return(invocation_id | replace('-', '') | lower) }}
{% endmacro %}


{#- This run: its host, process and the time, as the Spark driver sees them. -#}
{% macro _spark_claim_me() %}
  {%- set row = run_query("select reflect('java.net.InetAddress', 'getLocalHost'),"
      ~ " reflect('java.lang.ProcessHandle', 'current'), unix_timestamp()").rows[0] -%}
  {{ return({'host': row[0] | replace("'", ""), 'pid': row[1] | int, 'now': row[2] | int,
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


{#- If `holder` may still be running: drop this run's `ticket` and fail, naming it. -#}
{% macro _spark_claim_refuse_if_alive(holder, me, ticket) %}
  {%- if changefeed._spark_claim_alive(holder, me) -%}
    {%- do run_query('drop view if exists ' ~ ticket) -%}
    {%- do changefeed._spark_claim_refuse(holder) -%}
  {%- endif -%}
{% endmacro %}


{% macro _spark_claim_refuse(holder) %}
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


{#- The query of this run's views: the holder. -#}
{% macro _spark_claim_holder_sql(me) %}
  {{ return("select '" ~ invocation_id ~ "' as invocation_id, '" ~ me.host ~ "' as host, cast("
            ~ me.pid ~ ' as bigint) as pid, cast(' ~ me.now ~ " as bigint) as claimed_at, '"
            ~ me.method ~ "' as method, '" ~ model.unique_id ~ "' as model") }}
{% endmacro %}


{#- Take the claim of the model being run (idempotent within an invocation). -#}
{% macro _spark_claim_take() %}
  {%- if not changefeed._spark_claim_applies() -%}{{ return(none) }}{%- endif -%}
  {%- set key = changefeed._spark_claim_key(this.schema, this.identifier) -%}
  {%- set run = changefeed._spark_claim_run() -%}
  {%- do run_query('create schema if not exists ' ~ changefeed._spark_claim_schema()) -%}
  {%- if changefeed._spark_claim_views(key).tickets | selectattr(1, 'equalto', run) | list -%}
    {{ return(none) }}
  {%- endif -%}
  {%- set me = changefeed._spark_claim_me() -%}
  {%- set holder_sql = changefeed._spark_claim_holder_sql(me) -%}
  {%- set choosing = changefeed._spark_claim_view(key, run) -%}
  {%- do run_query('create or replace view ' ~ choosing ~ ' as ' ~ holder_sql) -%}
  {%- set numbers = changefeed._spark_claim_views(key).tickets | map(attribute=0) | list -%}
  {%- set mine = (numbers | max if numbers else 0) + 1 -%}
  {%- set ticket = changefeed._spark_claim_view(key, run, mine) -%}
  {%- do run_query('create or replace view ' ~ ticket ~ ' as ' ~ holder_sql) -%}
  {%- do run_query('drop view if exists ' ~ choosing) -%}
  {%- set state = namespace(done=false) -%}
  {%- for attempt in range(16) if not state.done -%}
    {%- set views = changefeed._spark_claim_views(key) -%}
    {%- for number, other, holder in views.tickets | sort
          if other != run and (number, other) < (mine, run) -%}
      {%- do changefeed._spark_claim_refuse_if_alive(holder, me, ticket) -%}
      {%- do run_query('drop view if exists ' ~ changefeed._spark_claim_view(key, other, number)) -%}
    {%- endfor -%}
    {%- set others = views.choosing | rejectattr(0, 'equalto', run) | list -%}
    {%- if not others -%}
      {%- set state.done = true -%}
    {%- elif attempt == 15 -%}
      {#-- still choosing after about 3 s: dead (its views are dropped), or alive and slow --#}
      {%- for other, holder in others -%}
        {%- do changefeed._spark_claim_refuse_if_alive(holder, me, ticket) -%}
        {%- do run_query('drop view if exists ' ~ changefeed._spark_claim_view(key, other)) -%}
      {%- endfor -%}
    {%- else -%}
      {%- do run_query("select reflect('java.lang.Thread', 'sleep', cast(200 as bigint))") -%}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}


{#- Release the claim of schema.identifier if this invocation holds it; `force` drops every
    run's views of the model (release_claim). Returns the holder released, or none. -#}
{% macro _spark_claim_release(schema, identifier, force=false) %}
  {%- set key = changefeed._spark_claim_key(schema, identifier) -%}
  {%- set run = changefeed._spark_claim_run() -%}
  {%- set views = changefeed._spark_claim_views(key) -%}
  {%- set released = namespace(holder=none) -%}
  {%- for number, other, holder in views.tickets | sort if force or other == run -%}
    {%- if released.holder is none -%}{%- set released.holder = holder -%}{%- endif -%}
    {%- do run_query('drop view if exists ' ~ changefeed._spark_claim_view(key, other, number)) -%}
  {%- endfor -%}
  {%- for other, holder in views.choosing if force -%}
    {%- do run_query('drop view if exists ' ~ changefeed._spark_claim_view(key, other)) -%}
  {%- endfor -%}
  {{ return(released.holder) }}
{% endmacro %}


{#- Whether `node`'s select takes the claim itself, through a feed macro that reads its
    cursor or batches (a state model's materialization takes it otherwise). -#}
{% macro _spark_claim_taken_by_select(node) %}
  {%- set macros = ['macro.changefeed.feed_events', 'macro.changefeed.feed_cursor', 'macro.changefeed.feed_batch'] -%}
  {{ return(macros | select('in', node.depends_on.macros) | list | length > 0) }}
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
    {%- if node.resource_type == 'model' -%}
      {%- set state_model = node.config.materialized in ['changefeed_current_state', 'changefeed_history'] -%}
      {#-- a state model that succeeded released its claim itself --#}
      {%- if (state_model and result.status != 'success')
            or (not state_model and changefeed._spark_claim_taken_by_select(node)) -%}
        {%- do changefeed._spark_claim_release(node.schema, node.alias or node.name) -%}
      {%- endif -%}
    {%- endif -%}
  {%- endfor -%}
{% endmacro %}
