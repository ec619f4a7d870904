{#- Private helpers shared by the ULID macros in this folder.

    Crockford base32 (the ULID alphabet) leaves out I, L, O and U. Spark's conv() and the
    bit-string tricks below produce or read the plain base32 digits 0-9A-V instead, so the
    implementations translate between the two alphabets.
-#}

{% macro _ulid_alphabet() -%}
0123456789ABCDEFGHJKMNPQRSTVWXYZ
{%- endmacro %}

{#- The ten letters of plain base32 (digits 10-31, as conv() writes them) ... -#}
{% macro _ulid_conv_letters() -%}
ABCDEFGHIJKLMNOPQRSTUV
{%- endmacro %}

{#- ... and the Crockford letters for the same digits. -#}
{% macro _ulid_crockford_letters() -%}
ABCDEFGHJKMNPQRSTVWXYZ
{%- endmacro %}

{#- A canonical ULID string, either case: the first character is 0-7 because 26 base32
    characters hold 130 bits and a ULID has 128. A PostgreSQL regex. -#}
{% macro _ulid_regex() -%}
^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$
{%- endmacro %}

{#- Validate a macro argument that must be a SQL expression (a non-empty string). -#}
{% macro _ulid_check_expression(macro_name, arg_name, value) -%}
    {%- if value is not string or value | trim == '' -%}
        {{ exceptions.raise_compiler_error(
            "changefeed." ~ macro_name ~ ": '" ~ arg_name ~ "' must be a SQL expression "
            ~ "given as a non-empty string (e.g. 'my_table.id'), got " ~ (value | string)
        ) }}
    {%- endif -%}
{%- endmacro %}
