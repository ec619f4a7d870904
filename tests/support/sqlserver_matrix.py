"""The render matrix of the SQL Server generators: feed specs (single and composite keys,
many key types and collations, hostile names, 128-character names, both modes, other
options), rendered through real dbt under the postgres target (the generators are pure
Jinja and never touch the adapter). Every case is parsed and checked by
tests/test_sqlserver_render.py; two representative cases (GOLDEN_CASES) are also kept as
reviewed golden files, one per batch, in ``tests/golden/sqlserver/<case>/<section>.sql``.

``CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py`` rewrites them
(docs/testing.md says how to review them). The live suite (``tests/sqlserver_live``)
renders the same matrix and executes its batches.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.dbt_harness import INTEGRATION_TESTS, REPO_ROOT, DbtHarness

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "sqlserver"
SECTIONS = ("setup", "upgrade", "teardown", "key_columns")
#: The cases kept as golden files: one per writer mode, the outbox one with its capture
#: trigger, so every generated procedure and statement kind appears once.
GOLDEN_CASES = ("blocking_int", "outbox_trigger")

#: One 128-character identifier, the longest a sysname can hold.
LONG_128 = ("long_" * 26)[:128]

#: Names that break naive quoting: quotes, brackets, `;`, spaces, a reserved word,
#: comment markers, non-ASCII (including a character outside the BMP), a newline.
HOSTILE_SCHEMA = "we'ird]] sch;ema"
HOSTILE_TABLE = "select 'x'; drop table [t]] -- æøå 日本 \U0001f600"
HOSTILE_KEYS: list[dict[str, Any]] = [
    {"name": "[key]", "data_type": "int", "collation": None},
    {"name": "o'clock; --", "data_type": "nvarchar(20)", "collation": "Latin1_General_CS_AS"},
    {"name": "end", "data_type": "datetime2(7)", "collation": None},
    {"name": "ünïcødé\ncol", "data_type": "decimal(18, 4)", "collation": None},
]


def spec(
    schema: str,
    table: str,
    mode: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    changefeed_schema: str = "changefeed",
    stall_timeout_ms: int = 5000,
    lock_probe_ms: int = 20,
    shard: str | None = None,
) -> dict[str, Any]:
    """A feed spec as changefeed._feed_spec builds it (see macros/_feed/_feed_spec.sql);
    a ``shard`` expression makes it ``capture: trigger``."""
    capture = {} if shard is None else {"capture": "trigger", "shard": shard}
    return {
        "feed_id": f"{schema}.{table}",
        "database": "changefeed_test",
        "source_schema": schema,
        "source_table": table,
        "source_relation": "[{}].[{}]".format(schema.replace("]", "]]"), table.replace("]", "]]")),
        "schema": changefeed_schema,
        "mode": mode,
        "keys": [dict(k) for k in keys],
        "stall_timeout_ms": stall_timeout_ms,
        "lock_probe_ms": lock_probe_ms,
        "block_bits": 36,
        "protocol_version": 3,
        **capture,
    }


INT_KEY: list[dict[str, Any]] = [{"name": "order_id", "data_type": "int", "collation": None}]
COMPOSITE_KEY: list[dict[str, Any]] = [
    {"name": "tenant_id", "data_type": "uniqueidentifier", "collation": None},
    {"name": "sku", "data_type": "nvarchar(40)", "collation": "Latin1_General_CI_AS"},
    {"name": "version", "data_type": "bigint", "collation": None},
]
MANY_TYPES_KEY: list[dict[str, Any]] = [
    {"name": "booked_at", "data_type": "datetime2(3)", "collation": None},
    {"name": "amount", "data_type": "decimal(18, 4)", "collation": None},
    {"name": "note", "data_type": "varchar(max)", "collation": "SQL_Latin1_General_CP1_CI_AS"},
    {"name": "code", "data_type": "char(10)", "collation": "Danish_Norwegian_CS_AS"},
    {"name": "day", "data_type": "date", "collation": None, "nullable": True},
    {"name": "blob", "data_type": "varbinary(max)", "collation": None},
]

CASES: dict[str, dict[str, Any]] = {
    "blocking_int": spec("shop", "orders", "blocking", INT_KEY),
    "outbox_int": spec("shop", "orders", "outbox", INT_KEY),
    "blocking_composite": spec("shop", "order_lines", "blocking", COMPOSITE_KEY),
    "outbox_composite": spec("shop", "order_lines", "outbox", COMPOSITE_KEY),
    "outbox_many_types": spec(
        "ledger", "entries", "outbox", MANY_TYPES_KEY, stall_timeout_ms=800, lock_probe_ms=10
    ),
    "blocking_other_schema": spec(
        "shop", "orders", "blocking", INT_KEY, changefeed_schema="changefeed v2"
    ),
    "blocking_hostile": spec(HOSTILE_SCHEMA, HOSTILE_TABLE, "blocking", HOSTILE_KEYS),
    "outbox_hostile": spec(HOSTILE_SCHEMA, HOSTILE_TABLE, "outbox", HOSTILE_KEYS),
    "blocking_long_names": spec(LONG_128, LONG_128, "blocking", COMPOSITE_KEY),
    "outbox_long_names": spec(
        LONG_128, LONG_128[:-1] + "y", "outbox", INT_KEY, changefeed_schema=LONG_128
    ),
    # two tables whose schema and table names join to the same feed id, my.schema.t
    "blocking_dotted_schema": spec("my.schema", "t", "blocking", INT_KEY),
    "blocking_dotted_table": spec("my", "schema.t", "blocking", INT_KEY),
    # capture: trigger
    "outbox_trigger": spec(
        "shop", "order_lines", "outbox", COMPOSITE_KEY, shard="abs(checksum([sku])) % 4"
    ),
    "outbox_trigger_hostile": spec(
        HOSTILE_SCHEMA,
        HOSTILE_TABLE,
        "outbox",
        HOSTILE_KEYS,
        shard="abs(checksum([[key]]], N'it''s \"q\"', \"end\")) % 3",
    ),
    # a shard expression of type bigint: it converts to int implicitly, so only its type
    # (sys.dm_exec_describe_first_result_set) shows that setup must refuse it (review #8)
    "outbox_trigger_bigint_shard": spec(
        "shop", "order_lines", "outbox", COMPOSITE_KEY, shard="[version] % 4"
    ),
    "outbox_trigger_long_names": spec(
        LONG_128, LONG_128, "outbox", INT_KEY, changefeed_schema=LONG_128, shard="0"
    ),
}


def jinja_string(value: str) -> str:
    """A Jinja string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def jinja_spec(value: Mapping[str, Any]) -> str:
    """A Jinja expression that evaluates to the spec dict."""
    return "fromjson(" + jinja_string(json.dumps(value, ensure_ascii=False)) + ")"


def snippets(case: Mapping[str, Any]) -> dict[str, str]:
    """The Jinja snippets that render one case: its three batches, the key-column query of
    its source table, its statement list, its object names and the dbt operations'
    statements (the last three as JSON)."""
    s = jinja_spec(case)
    any_mode = jinja_spec({**case, "mode": None})
    return {
        "setup": "{{ changefeed._sqlserver_setup_batch(" + s + ") }}",
        "upgrade": "{{ changefeed._sqlserver_upgrade_batch(" + s + ") }}",
        "teardown": "{{ changefeed._sqlserver_teardown_batch(" + s + ") }}",
        # the catalogue query that finds the key columns of the source table
        "key_columns": "{% set s = "
        + s
        + " %}{{ changefeed._sqlserver_key_columns_query(changefeed._sqlserver_quote_name("
        + "s.source_schema) ~ '.' ~ changefeed._sqlserver_quote_name(s.source_table)) }}",
        "statements": "{{ tojson(changefeed._sqlserver_feed_statements(" + s + ")) }}",
        # every object name of the feed, both modes' (what teardown drops), capture too
        "names": "{% set d = {} %}{% for k, e in changefeed._sqlserver_feed_context("
        + any_mode
        + ").n.items() %}{% do d.update({k: e.name}) %}{% endfor %}{{ tojson(d) }}",
        # the statements the dbt operations send (registry row, request_snapshot's two)
        "operations": "{% set c = changefeed._sqlserver_feed_context("
        + s
        + ") %}{% set d = {} %}{% for k, e in c.n.items() %}{% do d.update({k: e.name}) %}"
        "{% endfor %}{{ tojson([changefeed._sqlserver_sql_registry_row(c),"
        " changefeed._sqlserver_sql_request_snapshot(c, d, 3, ['[1]', none]),"
        " changefeed._sqlserver_sql_snapshot_first_ulid(c, d, 7)]) }}",
    }


def render_cases(dbt: Any, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Render the named cases in ONE dbt invocation: {case: {section: sql, 'statements': [..]}}."""
    keys: list[tuple[str, str]] = []
    jinja: list[str] = []
    for name in names:
        for section, snippet in snippets(CASES[name]).items():
            keys.append((name, section))
            jinja.append(snippet)
    rendered = dbt.render_many(jinja, "postgres")
    out: dict[str, dict[str, Any]] = {name: {} for name in names}
    for (name, section), text in zip(keys, rendered, strict=True):
        parsed = section in ("statements", "names", "operations")
        out[name][section] = json.loads(text) if parsed else text + "\n"
    return out


def golden_path(case: str, section: str) -> Path:
    return GOLDEN_DIR / case / f"{section}.sql"


def golden_text(case: str, section: str, out: Mapping[str, Any]) -> str:
    """The golden file of one section of a rendered case (``out``, see render_cases): a
    header naming what it is, then the SQL as rendered, except that in the upgrade batch
    every multi-line statement that the setup batch also runs (the procedures, the trigger,
    the shard check) is replaced by one comment naming it: test_sqlserver_render checks
    that the two batches create the same code, and the golden shows it once."""
    sql = out[section]
    if section == "upgrade":
        for statement in out["statements"]:
            if statement.count("\n") >= 3:
                first_line = statement.split("\n", 1)[0]
                sql = sql.replace(statement, f"-- @@as in setup.sql@@ {first_line}")
    return (
        f"-- Golden: the {section} SQL of render case {case!r}"
        " (tests/support/sqlserver_matrix.py),\n"
        "-- reviewed by hand. Regenerate (docs/testing.md):\n"
        "-- CHANGEFEED_UPDATE_GOLDEN=1 pytest tests/test_sqlserver_render.py\n" + sql
    )


def macros_harness(tmp_path_factory: Any, pg_uri: str) -> DbtHarness:
    """A dbt harness (tests/support/dbt_harness.py) on a project with the package and no
    models of its own: rendering macros only, so models elsewhere cannot break it."""
    project = tmp_path_factory.mktemp("sqlserver_render_project")
    shutil.copy(INTEGRATION_TESTS / "dbt_project.yml", project / "dbt_project.yml")
    (project / "packages.yml").write_text(f"packages:\n  - local: {REPO_ROOT}\n")
    return DbtHarness(
        tmp_path_factory.mktemp("sqlserver_render_dbt"),
        postgres_uri=lambda: pg_uri,
        project_dir=project,
    )


def registered_names(setup: str) -> dict[str, str]:
    """The object names a setup batch registers ({kind: raw name}), read back from the
    batch itself (the JSON literal it stores in the registry)."""
    from tests.support.tsql import string_value, tokens

    for token in tokens(setup):
        if token.kind == "string" and token.text.startswith('N\'{"barrier_acquire"'):
            names: dict[str, str] = json.loads(string_value(token.text))
            return names
    raise ValueError("the setup batch registers no names")
