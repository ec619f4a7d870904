{#- A PostgreSQL identifier, always quoted: "a""b" for a"b. Works for any name, including
    reserved words, spaces, `;`, non-ASCII and 63-byte names. -#}
{% macro _postgres_ident(name) %}
  {{ return('"' ~ (name | string).replace('"', '""') ~ '"') }}
{% endmacro %}
