{#-
  Spelling values for generated PostgreSQL: identifiers (always quoted), string literals,
  dollar quoting of routine bodies, and a relation as a `dbt run-operation --args` value
  in error messages. Every name in generated code goes through these, so hostile names
  (quotes, `;`, `$cf$`, non-ASCII, 63 bytes) work (protocol section 9, names).
-#}


{#- A PostgreSQL identifier, always quoted: "a""b" for a"b. Works for any name, including
    reserved words, spaces, `;`, non-ASCII and 63-byte names. -#}
{% macro _postgres_ident(name) %}
  {{ return('"' ~ (name | string).replace('"', '""') ~ '"') }}
{% endmacro %}


{#- A PostgreSQL string literal. E'...' with backslashes and quotes escaped, so the result
    is the same whatever standard_conforming_strings is. none renders as null. -#}
{% macro _postgres_literal(value) %}
  {%- if value is none -%}
    {{ return('null') }}
  {%- endif -%}
  {{ return("E'" ~ (value | string).replace('\\', '\\\\').replace("'", "''") ~ "'") }}
{% endmacro %}


{#- Dollar-quotes a routine body with the first of $tag$, $tag0$, $tag1$, ... that does not
    occur in it (an identifier such as a"$cf$"b inside the body must not end the quote
    early). The loop stops at the first free tag: setup quotes a dozen routines, and
    scanning all 1,000 candidates for each was most of its rendering time. -#}
{% macro _postgres_dollar_quote(body, tag='cf') %}
  {%- for suffix in [''] + range(1000) | list -%}
    {%- set candidate = '$' ~ tag ~ suffix ~ '$' -%}
    {%- if candidate not in body -%}
      {{ return(candidate ~ '\n' ~ body ~ '\n' ~ candidate) }}
    {%- endif -%}
  {%- endfor -%}
  {{ exceptions.raise_compiler_error("changefeed: cannot dollar-quote a routine body") }}
{% endmacro %}


{#- A plpgsql function without arguments that runs with its owner's rights and a fixed
    search_path (a trigger's or an event trigger's function: `returns` is `trigger` or
    `event_trigger`). -#}
{% macro _postgres_definer_function(q_name, returns, body) %}
  {{ return('create or replace function ' ~ q_name ~ '()
returns ' ~ returns ~ '
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as ' ~ changefeed._postgres_dollar_quote(body)) }}
{% endmacro %}


{#- How to name the feed's table in a `dbt run-operation ... --args` example: schema.table
    when both parts are plain identifiers, else the {schema, table} mapping. -#}
{% macro _postgres_relation_arg(spec) %}
  {%- set plain = modules.re.compile('^[A-Za-z_][A-Za-z0-9_]*$') -%}
  {%- if plain.match(spec['source_schema']) and plain.match(spec['source_table']) -%}
    {{ return(spec['source_schema'] ~ '.' ~ spec['source_table']) }}
  {%- endif -%}
  {{ return('{schema: ' ~ tojson(spec['source_schema']) ~ ', table: ' ~ tojson(spec['source_table']) ~ '}') }}
{% endmacro %}
