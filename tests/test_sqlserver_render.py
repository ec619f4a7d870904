"""SQL Server feeds without a SQL Server: render every generator macro for a matrix of feed
specs through real dbt (postgres target; the generators are pure Jinja), parse every
statement, including the ones run by ``exec sp_executesql N'...'``, with sqlfluff's tsql
dialect, check that every bracketed identifier is one we meant, and compare the two
representative cases with the reviewed golden files in ``tests/golden/sqlserver``.

``CHANGEFEED_UPDATE_GOLDEN=1`` rewrites the golden files instead of comparing (see
docs/testing.md). The live suite (``tests/sqlserver_live``) runs the same SQL on a real server.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import sqlserver_matrix as matrix
from tests.support import tsql_static as static
from tests.support.dbt_harness import INTEGRATION_TESTS, REPO_ROOT, DbtError, DbtHarness
from tests.support.tsql import (
    all_problems,
    executesql_bodies,
    parse_problems,
    string_value,
    tokens,
    warm_parse_cache,
)

pytestmark = pytest.mark.postgres

UPDATE_GOLDEN = os.environ.get("CHANGEFEED_UPDATE_GOLDEN", "") == "1"


@pytest.fixture(scope="module")
def macros_only(tmp_path_factory: pytest.TempPathFactory, pg_uri: str) -> DbtHarness:
    return matrix.macros_harness(tmp_path_factory, pg_uri)


@pytest.fixture(scope="module")
def dbt(macros_only: DbtHarness) -> DbtHarness:
    return macros_only


@pytest.fixture(scope="module")
def rendered(dbt: DbtHarness) -> dict[str, dict[str, Any]]:
    """The whole matrix, rendered in one dbt invocation; every distinct statement is then
    parsed once, in parallel, and the tests below look the results up."""
    out = matrix.render_cases(dbt, list(matrix.CASES))
    sqls = [case[s] for case in out.values() for s in matrix.SECTIONS]
    sqls += [statement for case in out.values() for statement in case["statements"]]
    sqls += [statement for case in out.values() for statement in case["operations"]]
    parsed = warm_parse_cache(sqls)
    print(f"\nsqlserver render matrix: {len(out)} cases, {parsed} distinct statement shapes parsed")
    return out


# -- the matrix: parse, names, golden -----------------------------------------------------


def check_case(case: str, out: dict[str, Any]) -> list[str]:
    """Every check a rendered case must pass; the matrix tests and the broken-macro test
    share it. Returns the problems found (empty: all good)."""
    spec = matrix.CASES[case]
    problems: list[str] = []
    for section in matrix.SECTIONS:
        found = all_problems(out[section], f"{case}/{section}")
        problems += found
        if found:
            continue
        # Every DDL that must start a batch runs through sp_executesql, so that a batch
        # runs as one transaction: none may appear at the top level of a batch.
        problems += [f"{case}/{section}: top-level {t!r}" for t in _top_level_creates(out[section])]
        # A wrongly quoted (or re-indented) name still parses but names another object:
        # decode every [identifier], at every nesting level, and require one we meant.
        expected = set(out["names"].values()) | {k["name"] for k in spec["keys"]}
        # the registry's own names, the schema owner (create schema ... authorization), and
        # the consumer table's column `cursor` (a reserved word)
        expected |= {spec["schema"], "feeds", "pk:feeds", "precision", "scale", "dbo", "cursor"}
        # the capture trigger lives on the source table; its shard expression is the user's
        expected |= {spec["source_schema"], spec["source_table"]}
        expected |= {t.text[1:-1].replace("]]", "]") for t in tokens(spec.get("shard") or "")
                     if t.text.startswith("[")}  # fmt: skip
        for sql in [out[section], *executesql_bodies(out[section])]:
            for token in tokens(sql):
                if token.text.startswith("["):
                    name = token.text[1:-1].replace("]]", "]")
                    if name not in expected:
                        problems.append(f"{case}/{section}: unexpected identifier {token.text!r}")
    for i, statement in enumerate(out.get("statements", [])):
        problems += all_problems(statement, f"{case}/statement {i}")
    for i, statement in enumerate(out.get("operations", [])):
        problems += all_problems(statement, f"{case}/operation {i}")
    return problems


@pytest.mark.parametrize("case", list(matrix.CASES))
def test_every_generated_statement_parses_and_names_what_it_means(
    rendered: dict[str, dict[str, Any]], case: str
) -> None:
    problems = check_case(case, rendered[case])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", list(matrix.CASES))
def test_setup_batch_runs_exactly_the_feed_statements(
    rendered: dict[str, dict[str, Any]], case: str
) -> None:
    out = rendered[case]
    setup = out["setup"]
    position = 0
    for i, statement in enumerate(out["statements"]):
        found = setup.find(statement, position)
        assert found >= 0, f"statement {i} is not in the setup batch (in order):\n{statement}"
        position = found + len(statement)
    # the procedures are exactly the ones upgrade re-creates; the only tables upgrade
    # creates are retention's and snapshots', for a feed set up without them
    creates = [b for b in executesql_bodies(setup) if b.startswith("create or alter")]
    upgrade = executesql_bodies(out["upgrade"])
    assert creates == [b for b in upgrade if b.startswith("create or alter")]
    schema = "[" + matrix.CASES[case]["schema"].replace("]", "]]") + "]"
    tables = [
        f"create table {schema}.[{out['names'][kind].replace(']', ']]')}] (\n"
        for kind in ("retention", "consumer", "snapshot")
    ]
    created = [b for b in upgrade if b.startswith("create table")]
    assert [b[: len(t)] for b, t in zip(created, tables, strict=True)] == tables


@pytest.mark.parametrize("section", matrix.SECTIONS)
@pytest.mark.parametrize("case", matrix.GOLDEN_CASES)
def test_matches_golden(rendered: dict[str, dict[str, Any]], case: str, section: str) -> None:
    text = matrix.golden_text(case, section, rendered[case])
    path = matrix.golden_path(case, section)
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; run with CHANGEFEED_UPDATE_GOLDEN=1 and review it"
    golden = path.read_text(encoding="utf-8")
    if golden != text:
        diff = "".join(
            difflib.unified_diff(
                golden.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{case}/{path.name}",
                tofile="rendered",
                n=2,
            )
        )
        pytest.fail(
            f"the rendered T-SQL of {case!r} ({section}) drifted from {path}; review the diff "
            f"and, if it is intended, regenerate with CHANGEFEED_UPDATE_GOLDEN=1:\n{diff[:20000]}"
        )


def test_golden_directory_has_no_stale_files() -> None:
    on_disk = {str(p.relative_to(matrix.GOLDEN_DIR)) for p in matrix.GOLDEN_DIR.rglob("*.sql")}
    expected = {
        f"{case}/{section}.sql" for case in matrix.GOLDEN_CASES for section in matrix.SECTIONS
    }
    assert on_disk == expected


# -- static checks of defect classes (tests/support/tsql_static.py) ----------------------------


def _quoted_tables(case: str, out: dict[str, Any]) -> dict[str, str]:
    """kind -> the quoted two-part name of each of the case's tables."""
    schema = "[" + matrix.CASES[case]["schema"].replace("]", "]]") + "]"
    return {
        kind: schema + ".[" + out["names"][kind].replace("]", "]]") + "]"
        for kind in static.HOT_TABLES
        if kind in out["names"]
    }


def static_problems(case: str, out: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for section in ("setup", "upgrade", "teardown"):
        label = f"{case}/{section}"
        problems += static.literal_typing_problems(out[section], label)
        problems += static.batch_option_problems(out[section], label)
        problems += static.schema_owner_problems(out[section], label)
        problems += static.catch_all_problems(out[section], label)
        problems += static.session_applock_problems(out[section], label)
        problems += static.schemabinding_problems(out[section], label)
    tables = _quoted_tables(case, out)
    problems += static.lock_escalation_problems(out["setup"], f"{case}/setup", tables)
    if "outbox" in tables:
        for section in ("setup", "upgrade"):
            problems += static.sequence_default_problems(
                out[section], f"{case}/{section}", tables["outbox"]
            )
    return problems


@pytest.mark.parametrize("case", list(matrix.CASES))
def test_static_checks_find_no_defect_class(rendered: dict[str, dict[str, Any]], case: str) -> None:
    problems = static_problems(case, rendered[case])
    assert not problems, "\n".join(problems)


FEED = "[changefeed].[feed:shop.orders]"
OUTBOX = "[changefeed].[outbox:shop.orders]"
GOOD_START = (
    "-- title\nset nocount on;\nset xact_abort on;\n"
    "set ansi_nulls, ansi_padding, ansi_warnings, arithabort, concat_null_yields_null,"
    " quoted_identifier on;\nset numeric_roundabort off;\nbegin transaction;\n"
)


@pytest.mark.parametrize(
    ("check", "bad", "good"),
    [
        # review #1: a bigint plus a decimal literal, converted to binary(8)
        (
            "literal",
            "exec sp_executesql N'create procedure p as\n"
            "set @b = convert(binary(8), @low + 68719476735);';",
            "exec sp_executesql N'create procedure p as\n"
            "set @b = convert(binary(8), @low + convert(bigint, 68719476735));';",
        ),
        (
            "literal",
            "select convert(binary(8), 68719476736);",
            "select @i where @i >= 68719476736;",
        ),
        ("literal", "set @low = 4294967296 * @x;", "set @low = convert(bigint, 4294967296) * @x;"),
        # review #13: a batch without the ANSI options its objects keep
        ("options", "set nocount on;\nset xact_abort on;\nbegin transaction;\n", GOOD_START),
        (
            "options",
            GOOD_START.replace("set numeric_roundabort off;\n", ""),
            GOOD_START,
        ),
        (
            "options",
            "begin transaction;\n" + GOOD_START,  # the options must come first
            GOOD_START,
        ),
        # review #11: a hot table that may escalate to a table lock
        (
            "escalation",
            f"exec sp_executesql N'create table {FEED} (shard_id int not null)';",
            f"exec sp_executesql N'create table {FEED} (shard_id int not null)';\n"
            f"exec sp_executesql N'alter table {FEED} set (lock_escalation = disable)';",
        ),
        # review #26: a catch-all predicate
        (
            "catch_all",
            "exec sp_executesql N'create procedure p as\n"
            "select head from s where @shard_id is null or shard_id = @shard_id;';",
            "exec sp_executesql N'create procedure p as\n"
            "if @shard_id is null select head from s; else select head from s"
            " where shard_id = @shard_id;';",
        ),
        # review #3: a schema owned by whoever deployed it
        (
            "owner",
            "exec sp_executesql N'create schema [changefeed]';",
            "exec sp_executesql N'create schema [changefeed] authorization [dbo]';",
        ),
        # review #17: a session-owned applock outside the writer's lock procedure
        (
            "applock",
            "exec sp_executesql N'create or alter procedure [c].[barrier_check:t] as\n"
            "exec @rc = sp_getapplock @Resource = @n, @LockMode = N''Shared'',"
            " @LockOwner = N''Session'';';",
            "exec sp_executesql N'create or alter procedure [c].[barrier_check:t] as\n"
            "exec @rc = sp_getapplock @Resource = @n, @LockMode = N''Shared'',"
            " @LockOwner = N''Transaction'';';",
        ),
        # review #28: a function SQL Server must assume reads data
        (
            "schemabinding",
            "exec sp_executesql N'create or alter function [c].[ulid:t](@v bigint)\n"
            "returns binary(16)\nas\nbegin return null; end';",
            "exec sp_executesql N'create or alter function [c].[ulid:t](@v bigint)\n"
            "returns binary(16)\nwith schemabinding\nas\nbegin return null; end';",
        ),
        # review #24: NEXT VALUE FOR (the outbox default) in a statement with UNION
        (
            "sequence",
            f"insert into {OUTBOX} (shard_id, [k]) select 0, i.[k] from inserted as i"
            " union select 0, d.[k] from deleted as d;",
            "declare @changed table (shard_id int not null, [k] int not null);\n"
            "insert into @changed (shard_id, [k]) select 0, i.[k] from inserted as i"
            f" union select 0, d.[k] from deleted as d;\ninsert into {OUTBOX} (shard_id, [k])"
            " select shard_id, [k] from @changed;",
        ),
    ],
)
def test_static_checks_reject_a_broken_rendering(check: str, bad: str, good: str) -> None:
    run = {
        "literal": static.literal_typing_problems,
        "options": static.batch_option_problems,
        "escalation": lambda sql, label: static.lock_escalation_problems(
            sql, label, {"feed": FEED}
        ),
        "owner": static.schema_owner_problems,
        "catch_all": static.catch_all_problems,
        "applock": static.session_applock_problems,
        "schemabinding": static.schemabinding_problems,
        "sequence": lambda sql, label: static.sequence_default_problems(sql, label, OUTBOX),
    }[check]
    assert run(bad, "bad"), f"the {check} check let this through:\n{bad}"
    assert run(good, "good") == []


# -- names --------------------------------------------------------------------------------


def test_long_names_are_shortened_to_128_characters(rendered: dict[str, dict[str, Any]]) -> None:
    import hashlib

    for case in ("blocking_long_names", "outbox_long_names"):
        feed_id = matrix.CASES[case]["feed_id"]
        suffix = "~" + hashlib.md5(feed_id.encode("utf-8")).hexdigest()[:8]
        names = matrix.registered_names(rendered[case]["setup"])
        assert names, case
        for kind, name in names.items():
            assert len(name) == 128, (kind, name)
            assert name.endswith(suffix), (kind, name)
            # kind:, then the longest prefix of the feed id that fits, then the hash
            kind_text, _, prefix = name[: -len(suffix)].partition(":long_")
            assert feed_id.startswith("long_" + prefix), (kind, name)
            assert len(kind_text) + 1 + len("long_" + prefix) + len(suffix) == 128


def test_lock_names_fit_sp_getapplock(rendered: dict[str, dict[str, Any]]) -> None:
    # <schema>/<feed id>/<shard>/<generation> must stay within 255 characters even for an
    # 11-character shard and a 10-character generation; longer feed ids are shortened.
    spec = matrix.CASES["outbox_long_names"]
    inner = "\n".join(executesql_bodies(rendered["outbox_long_names"]["setup"]))
    prefixes = {
        value
        for t in tokens(inner)
        if t.kind == "string"
        for value in [t.text[2:-1].replace("''", "'")]
        if value.startswith(spec["schema"] + "/") and value.endswith("/")
    }
    assert len(prefixes) == 1, prefixes
    (prefix,) = prefixes
    assert len(prefix + "-2147483648/2147483647") <= 255
    assert "N''changefeed/shop.orders/''" in rendered["blocking_int"]["setup"]


def test_a_feed_id_registered_for_another_table_is_refused(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """[my.schema].[t] and [my].[schema.t] share the feed id my.schema.t (review #14): every
    batch of one refuses the other's registry row (51060) before it changes anything."""
    out = rendered["blocking_dotted_table"]
    check = "(source_schema <> N'my' or source_table <> N'schema.t')"
    first_change = {
        "setup": "if @action = N'created'",
        "upgrade": "create or alter",
        "teardown": "drop ",
    }
    for section, change in first_change.items():
        sql = out[section]
        assert check in sql and "throw 51060" in sql, section
        assert sql.index("throw 51060") < sql.index(change), section
    assert (
        "(source_schema <> N'my.schema' or source_table <> N't')"
        in (rendered["blocking_dotted_schema"]["setup"])
    )


def test_the_registry_holds_a_source_relation_of_any_length(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Two bracketed 128-character names of `]` are 517 characters (review #23); registries
    created with nvarchar(400) are widened."""
    setup = rendered["blocking_hostile"]["setup"]
    assert "source_relation nvarchar(max) not null," in setup
    assert "alter column source_relation nvarchar(max) not null" in setup


# -- a broken macro must fail these checks -------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        # a quote not doubled inside the text that sp_executesql runs
        "exec sp_executesql N'create procedure [c].[p] as select N'x'' as y';",
        # an identifier that SQL Server would read as ending early
        "select [a]b] from t;",
        # a `]` not doubled in a bracketed name
        "create table [changefeed].[state:we]ird.t] (shard_id int not null);",
        # a procedure body that lost its end
        "exec sp_executesql N'create procedure [c].[p] as begin select 1;';",
        # a broken statement nested two levels deep
        "exec sp_executesql N'exec sp_executesql N''select from where;'';';",
    ],
)
def test_the_checker_rejects_known_bad_tsql(bad: str) -> None:
    assert all_problems(bad, "bad")


def test_the_checker_accepts_sql_servers_bracket_rule() -> None:
    # sqlfluff's own tsql lexer rejects `]]` inside brackets; tests/support/tsql.py
    # patches in SQL Server's rule, and a wrongly escaped name still fails.
    assert parse_problems("select [a]]b], [c[d] from [e f];") == []
    assert parse_problems("drop function [changefeed].[ulid:we']]ird];") == []
    assert parse_problems("select [a]b] from t;")


#: Deliberately broken versions of the quoting macros in macros/sqlserver/quoting.sql.
BROKEN_MACROS = {
    # quotes not doubled: the hostile names' quotes end literals early
    "_sqlserver_literal": """{% macro _sqlserver_literal(value) %}
  {{ return("N'" ~ value ~ "'") }}
{% endmacro %}""",
    # `]` not doubled: the hostile names' brackets end identifiers early
    "_sqlserver_quote_name": """{% macro _sqlserver_quote_name(name) %}
  {{ return('[' ~ name ~ ']') }}
{% endmacro %}""",
}


@pytest.fixture(scope="module")
def broken_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the dbt package and of the integration_tests project, ready for one
    broken macro file at a time."""
    root = tmp_path_factory.mktemp("broken")
    package = root / "package"
    shutil.copytree(REPO_ROOT / "macros", package / "macros")
    shutil.copy(REPO_ROOT / "dbt_project.yml", package / "dbt_project.yml")
    project = root / "project"
    project.mkdir()
    shutil.copy(INTEGRATION_TESTS / "dbt_project.yml", project / "dbt_project.yml")
    (project / "packages.yml").write_text(f"packages:\n  - local: {package}\n")
    yield root


@pytest.mark.slow
@pytest.mark.parametrize("macro", list(BROKEN_MACROS))
def test_a_broken_macro_fails_the_parse_check(
    broken_package: Path, pg_uri: str, macro: str
) -> None:
    """Deliberately break one quoting macro in a copy of the package, render the
    hostile-names case through dbt exactly as the matrix does, and require the checks
    above to fail."""
    target = broken_package / "package" / "macros" / "sqlserver" / "quoting.sql"
    original = target.read_text()
    definition = re.compile(r"\{% macro " + macro + r"\(.*?\{% endmacro %\}", re.S)
    assert len(definition.findall(original)) == 1, f"{macro} is not defined once in {target}"
    target.write_text(definition.sub(lambda _: BROKEN_MACROS[macro], original))
    try:
        harness = DbtHarness(
            broken_package / f"dbt-{macro}",
            postgres_uri=lambda: pg_uri,
            project_dir=broken_package / "project",
        )
        try:
            out = matrix.render_cases(harness, ["blocking_hostile"])["blocking_hostile"]
        except DbtError as exc:  # rendering itself may already choke; that is a failure too
            pytest.fail(f"the broken macro made rendering fail outright: {exc}")
        problems = check_case("blocking_hostile", out)
        assert problems, f"breaking {macro} went unnoticed by the checks"
    finally:
        target.write_text(original)


# -- spec validation: clear errors ---------------------------------------------------------


def _render_setup(dbt: Any, spec: dict[str, Any]) -> str:
    return str(
        dbt.render(
            "{{ changefeed._sqlserver_setup_batch(" + matrix.jinja_spec(spec) + ") }}", "postgres"
        )
    )


# The options (mode, capture, shard, timeouts) and the spec's key list and block size are
# validated once, before any adapter code, by macros/_feed (tests/test_feed_macros.py);
# what is left here is what only SQL Server limits: its names and its type spellings.
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"keys": [{"name": "ULID", "data_type": "int"}]},
            "key column 'ULID' .* has the name of a column",
        ),
        (
            {"keys": [{"name": "a", "data_type": "int"}, {"name": "A", "data_type": "int"}]},
            "key column 'A' of shop.orders is listed twice",
        ),
        (
            {"keys": [{"name": "a", "data_type": "int); drop table x; --"}]},
            "cannot be written safely",
        ),
        (
            {"keys": [{"name": "a", "data_type": "nvarchar(10)", "collation": "x' --"}]},
            "unexpected collation name",
        ),
        ({"schema": "x" * 129}, "is 129 characters .* the limit is 128"),
        ({"schema": "\U0001f600" * 65}, "is 130 characters \\(UTF-16 code units\\)"),
        ({"keys": [{"name": "k" * 129, "data_type": "int"}]}, "is 129 characters"),
        ({"row_image": True}, "row_image: true .* is not supported on SQL Server yet"),
    ],
)
def test_bad_specs_fail_with_a_clear_error(dbt: Any, change: dict[str, Any], message: str) -> None:
    spec = dict(matrix.CASES["blocking_int"])
    spec.update(change)
    with pytest.raises(DbtError, match=message):
        _render_setup(dbt, spec)


def test_teardown_needs_no_mode_or_keys(dbt: Any, rendered: dict[str, dict[str, Any]]) -> None:
    spec = dict(matrix.CASES["outbox_int"])
    spec.update({"mode": None, "keys": None, "stall_timeout_ms": None, "lock_probe_ms": None})
    sql = str(
        dbt.render(
            "{{ changefeed._sqlserver_teardown_batch(" + matrix.jinja_spec(spec) + ") }}",
            "postgres",
        )
    )
    assert sql.strip() == rendered["outbox_int"]["teardown"].strip()


def test_teardown_drops_every_routine_that_setup_creates(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Teardown drops the routines in an order of its own (macros/sqlserver/teardown.sql),
    not from _sqlserver_routine_kinds: every procedure and function that setup creates,
    in either mode, is among them."""
    created = re.compile(r"create or alter (procedure|function) (\[changefeed\]\.\[[^\]]+\])")
    for case in ("blocking_int", "outbox_trigger"):
        out = rendered[case]
        routines = set(created.findall(out["setup"]))
        assert len(routines) >= 12, (case, routines)
        for word, name in routines:
            assert f"drop {word} {name};" in out["teardown"], (case, name)


def test_quoting_macros(dbt: Any) -> None:
    out = dbt.render_many(
        [
            "{{ changefeed._sqlserver_quote_name('a]b') }}",
            "{{ changefeed._sqlserver_quote_name('" + "x" * 128 + "') }}",
            '{{ changefeed._sqlserver_literal("it\'s") }}',
            "{{ changefeed._sqlserver_literal('') }}",
        ],
        "postgres",
    )
    assert out == ["[a]]b]", "[" + "x" * 128 + "]", "N'it''s'", "N''"]


@pytest.mark.parametrize(
    ("args", "spelled"),
    [
        ("'int', 4, 10, 0", "int"),
        ("'nvarchar', 80, 0, 0", "nvarchar(40)"),
        ("'nvarchar', -1, 0, 0", "nvarchar(max)"),
        ("'varchar', -1, 0, 0", "varchar(max)"),
        ("'char', 10, 0, 0", "char(10)"),
        ("'varbinary', 16, 0, 0", "varbinary(16)"),
        ("'decimal', 9, 18, 4", "decimal(18, 4)"),
        ("'numeric', 5, 5, 0", "numeric(5, 0)"),
        ("'datetime2', 8, 27, 7", "datetime2(7)"),
        ("'datetimeoffset', 10, 34, 7", "datetimeoffset(7)"),
        ("'time', 5, 12, 3", "time(3)"),
        ("'uniqueidentifier', 16, 0, 0", "uniqueidentifier"),
        ("'timestamp', 8, 0, 0", "binary(8)"),
        ("'text', 16, 0, 0", "varchar(max)"),
        ("'ntext', 16, 0, 0", "nvarchar(max)"),
        ("'image', 16, 0, 0", "varbinary(max)"),
        ("'hierarchyid', 892, 0, 0", "hierarchyid"),
        # the catalogue rows that tests/sqlserver_live reads for the matrix's key types
        ("'datetime2', 7, 23, 3", "datetime2(3)"),
        ("'date', 3, 10, 0", "date"),
        ("'bigint', 8, 19, 0", "bigint"),
        ("'varbinary', -1, 0, 0", "varbinary(max)"),
    ],
)
def test_key_types_are_spelled_for_a_column_declaration(dbt: Any, args: str, spelled: str) -> None:
    assert dbt.render("{{ changefeed._sqlserver_spell_type(" + args + ") }}", "postgres") == spelled


def test_key_columns_query_parses(dbt: Any) -> None:
    sql = str(
        dbt.render('{{ changefeed._sqlserver_key_columns_query("[we\'ird]].s].[t]") }}', "postgres")
    )
    assert "object_id(N'[we''ird]].s].[t]')" in sql
    assert parse_problems(sql) == []


def test_ulid_constants(rendered: dict[str, dict[str, Any]]) -> None:
    """The masks and bounds that section 3 of the protocol defines, for BLOCK = 2^36."""
    setup = rendered["blocking_int"]["setup"]
    block = 2**36
    fresh = (2**64 - 1) & ~(1 << 62) & ~(block - 1)
    assert f"convert(bigint, 0x{fresh:016X})" in setup  # random8 & ~(1 << 62) & ~(BLOCK - 1)
    assert f"@st_low <= {2**63 - 1 - block}" in setup  # continuing keeps next-free representable
    assert f"0x{(2**64 - block):016X}" in setup  # block of a ULID: low & ~(BLOCK - 1)
    assert "crypt_gen_random(2)" in setup  # the two random bytes after the time, every fresh block
    outbox = rendered["outbox_int"]["setup"]
    assert "datediff_big(millisecond, ''1970-01-01'', @b_time)) + crypt_gen_random(2)" in outbox


# -- helpers -------------------------------------------------------------------------------


def _top_level_creates(sql: str) -> list[str]:
    """`create procedure|function|type|schema|...` outside sp_executesql strings."""
    toks = tokens(sql)
    found = []
    for a, b in itertools.pairwise(toks):
        if a.kind == b.kind == "word" and a.text.lower() == "create":
            found.append(f"{a.text} {b.text}")
    return found


# -- review items that the generated SQL shows (the live suite runs them on a server) ------


def _body(sql: str, start: str) -> str:
    """The statement run through sp_executesql that starts with ``start``."""
    (body,) = [b for b in executesql_bodies(sql) if b.startswith(start)]
    return body


def test_the_shard_expression_must_give_an_integer_type(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Review #8: the probe insert compiles for any type convertible to int; the setup asks
    SQL Server for the expression's type and refuses all but int, smallint and tinyint."""
    for section in ("setup", "upgrade"):
        sql = rendered["outbox_trigger"][section]
        describe = (
            "sys.dm_exec_describe_first_result_set(N'select (abs(checksum([sku])) % 4) as shard_id"
            " from [shop].[order_lines] as s', null, 0)"
        )
        assert describe in sql, section
        assert "where system_type_name in (N'int', N'smallint', N'tinyint'))" in sql
        check = sql.index(describe)
        assert sql.index("throw 51058", check) < sql.index("create or alter trigger"), section
    hostile = rendered["outbox_trigger_hostile"]["setup"]
    assert "N'select (abs(checksum([[key]]], N''it''''s \"q\"'', \"end\")) % 3) as shard_id" in (
        hostile
    )


def test_the_burn_compares_the_committed_state_row(rendered: dict[str, dict[str, Any]]) -> None:
    """Review #18: the stall samples are dirty reads; the burn's compare-and-set waits for
    the committed row under an update lock before it marks any session abandoned."""
    lock = _body(rendered["blocking_int"]["setup"], "create or alter procedure [changefeed].[lock:")
    burn = lock[lock.index("set @burned = 0;") :]
    # an update lock reads the committed row, waiting for its writer, under RCSI too
    committed = burn.index("with (updlock, rowlock)")
    gate = burn.index("if @@rowcount = 1", committed)
    assert committed < gate < burn.index("end_reason = N'stall'")
    assert "and ulid_low = @low1;" in burn[committed:gate]
    assert "readuncommitted" not in burn[: burn.index("end catch;")]


def test_the_trigger_is_changed_only_when_its_text_differs(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Review #20: a trigger change takes a schema lock on the source table. Setup skips
    it when the enabled trigger already has the text (completed with the key columns as
    they are now), and waits at most 10 s for the lock (lock_timeout set inside the
    sp_executesql, so it ends there) before failing with 51061."""
    for section in ("setup", "upgrade"):
        body = _capture_setup(rendered["outbox_trigger"][section])
        ddl = body.index(
            "exec sp_executesql N'set lock_timeout 10000;\nexec sp_executesql @ddl;\n"
            "enable trigger [shop].[capture:changefeed.shop.order_lines] on [shop].[order_lines];',"
            " N'@ddl nvarchar(max)', @ddl;"
        )
        guard = body.rindex("if not exists (", 0, ddl)
        assert body.index("set @ddl = replace(N'create or alter trigger") < guard
        assert "object_definition(t.object_id)) = convert(varbinary(max), @ddl)" in body[guard:ddl]
        assert "t.is_disabled = 0" in body[guard:ddl]
        assert body.index("if error_number() = 1222", ddl) < body.index("throw 51061", ddl)
    # capture: none drops a trigger left from capture: trigger, under the same timeout
    assert (
        "set lock_timeout 10000;\nexec sp_executesql N''drop trigger"
        in (rendered["outbox_int"]["setup"])
    )
    # the batch itself keeps the client's lock_timeout
    assert (
        "set lock_timeout" not in rendered["outbox_trigger"]["setup"].split("begin transaction;")[0]
    )


def _capture_setup(sql: str) -> str:
    """The sp_executesql body that completes and (re)creates the capture trigger."""
    return _body(sql, "declare @key_columns nvarchar(max), @ddl nvarchar(max);")


def _literal(body: str, start: str) -> str:
    """The value of the one string literal of ``body`` whose text starts with ``start``."""
    (value,) = [string_value(t.text) for t in tokens(body)
                if t.kind == "string" and t.text.startswith(start)]  # fmt: skip
    return value


def _capture_trigger(sql: str) -> str:
    """The capture trigger's text as setup holds it, before the key columns are filled in."""
    return _literal(_capture_setup(sql), "N'create or alter trigger")


def test_the_capture_trigger_refuses_writes_once_its_key_columns_changed(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Issue 14, item 1: a key column renamed, swapped, retyped or dropped since setup would
    make capture name the wrong rows. Setup bakes each key column's column_id and type
    (system and user type id, max_length, precision, scale, collation), looked up by name,
    into the trigger's text; the trigger looks them up again once per statement (one seek
    in sys.triggers and one in sys.columns per key column) and refuses the write with 51067
    before capturing anything when they differ."""
    columns = (
        "concat(N'[tenant_id] ', isnull((select concat(k.column_id, N':', k.system_type_id,"
        " N':', k.user_type_id, N':', k.max_length, N':', k.[precision], N':', k.[scale], N':',"
        " k.collation_name) from sys.columns as k where k.object_id = {source}"
        " and k.name = N'tenant_id'), N'missing'), N'; [sku] ', "
    )
    placeholder = "N'changefeed: the key columns at setup'"
    for section in ("setup", "upgrade"):
        body = _capture_setup(rendered["outbox_trigger"][section])
        trigger = _capture_trigger(rendered["outbox_trigger"][section])
        assert all_problems(trigger, f"outbox_trigger/{section}: capture trigger") == []
        # setup reads the source by name, the trigger the table it fires on: the same
        # expression otherwise, so an unchanged table gives the baked text exactly
        assert columns.format(source="object_id(N'[shop].[order_lines]', N'U')") in body
        assert columns.format(source="@source") in trigger
        assert trigger.count("from sys.columns") == 3  # one seek per key column
        assert (
            "declare @source int = (select t.parent_id from sys.triggers as t"
            " where t.object_id = @@procid);" in trigger
        )
        assert trigger.count(placeholder) == 2  # compared, and shown in the message
        assert (
            "N'N''changefeed: the key columns at setup''',\n"
            "    concat(N'N''', replace(@key_columns, N'''', N''''''), N''''));" in body
        )
        check = trigger.index(f"if @key_columns <> {placeholder}")
        refuse = trigger.index("throw 51067, @msg, 1;")
        assert check < refuse < trigger.index("insert into @changed")
        assert "Run setup_feed (or upgrade_feed)" in trigger
        assert "the feed shop.order_lines" in trigger
    # setup with the registered config re-creates a trigger that is gone, disabled, or
    # baked for other key columns than the source has now
    repair = rendered["outbox_trigger"]["setup"]
    repair = repair[repair.index("if @action = N'unchanged' and (not exists (") :]
    repair = repair[: repair.index("set @action = N'repaired';")]
    assert "t.is_disabled = 0" in repair
    baked = "charindex(concat(N'if @key_columns <> N''', replace("
    assert baked + columns.format(source="object_id(N'[shop].[order_lines]', N'U')") in repair
    assert "51067" not in rendered["outbox_int"]["setup"]
    assert "51067" not in rendered["blocking_int"]["setup"]


def test_incidents_are_trimmed_to_the_newest_1000_per_shard(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Issue 14, item 3: every call that records an incident (a stall burn in lock, a
    tombstone) deletes the shard's incidents 1,000 generations or more below the one it
    recorded, in the same transaction; one incident per generation, so at most 1,000 rows
    per shard remain."""
    for case, feed in (("blocking_int", "shop.orders"), ("outbox_trigger", "shop.order_lines")):
        table = f"[changefeed].[incident:{feed}]"
        insert = f"insert into {table} ("
        trim = "where shard_id = @shard_id and generation <= @g - 1000;"
        for section in ("setup", "upgrade"):
            bodies = [b for b in executesql_bodies(rendered[case][section]) if insert in b]
            # an outbox feed has no writer lock, so no stall burn: only tombstones
            routines = ["lock", "tombstone"] if case == "blocking_int" else ["tombstone"]
            assert sorted(b.split(":")[0] for b in bodies) == [
                f"create or alter procedure [changefeed].[{routine}" for routine in routines
            ], (case, section)
            for body in bodies:
                for found in re.finditer(re.escape(insert), body):
                    delete = body.index(f"delete from {table}", found.start())
                    assert body.index(trim, delete) < body.index("commit", found.start())


def test_the_trigger_stages_the_union_before_the_outbox_insert(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Review #24: the outbox's order_sequence defaults to NEXT VALUE FOR, which is
    documented as refused in a statement with UNION; the trigger's union goes into a
    table variable first (static.sequence_default_problems checks the class)."""
    trigger = _capture_trigger(rendered["outbox_trigger"]["setup"])
    assert (
        "declare @changed table (shard_id int not null, [tenant_id] uniqueidentifier not null,"
        " [sku] nvarchar(40) collate Latin1_General_CI_AS not null, [version] bigint not null);"
        in trigger
    )
    keys = "[tenant_id], [sku], [version]"
    staged = trigger.index(f"insert into @changed (shard_id, {keys})")
    assert (
        staged
        < trigger.index("union")
        < trigger.index(
            f"insert into [changefeed].[outbox:shop.order_lines] (shard_id, {keys})\n"
            f"    select shard_id, {keys} from @changed;"
        )
    )


def test_shards_finds_the_outbox_shards_by_seeks(rendered: dict[str, dict[str, Any]]) -> None:
    """Review #27: no scan of the whole outbox; one top (1) seek per shard on its key."""
    shards = _body(
        rendered["outbox_trigger"]["setup"], "create or alter procedure [changefeed].[shards:"
    )
    outbox = "[changefeed].[outbox:shop.order_lines]"
    reads = [m.start() for m in re.finditer(re.escape("from " + outbox), shards)]
    assert len(reads) == 2
    for at in reads:
        assert shards.rindex("select top (1) ", 0, at) > shards.rindex(";", 0, at)
    assert "where shard_id > @shard" in shards
    assert "order by shard_id;" in shards


def test_the_outbox_key_is_optimized_for_sequential_inserts_where_the_server_has_it(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Review #29: optimize_for_sequential_key exists from SQL Server 2019 (and on Azure
    SQL); it is set by a statement that only runs there, so setup still works on 2017."""
    guard = (
        "if convert(int, serverproperty('ProductMajorVersion')) >= 15"
        " or convert(int, serverproperty('EngineEdition')) in (5, 8)\n"
        "    exec sp_executesql N'if exists (\n    select 1 from sys.indexes\n"
        "    where object_id = object_id(N''[changefeed].[outbox:shop.order_lines]'')"
        " and is_primary_key = 1 and optimize_for_sequential_key = 0)\n"
        "    alter index [pk:outbox:shop.order_lines] on"
        " [changefeed].[outbox:shop.order_lines] set (optimize_for_sequential_key = on)';"
    )
    for section in ("setup", "upgrade"):
        assert guard in rendered["outbox_trigger"][section], section
    create = _body(rendered["outbox_trigger"]["setup"], "create table [changefeed].[outbox:")
    assert "optimize_for_sequential_key" not in create
    assert "optimize_for_sequential_key" not in rendered["blocking_int"]["setup"]


# -- retention (protocol 8.1) -----------------------------------------------------------------


def test_retention_objects_are_created_granted_and_dropped(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Every feed gets the retention and consumer tables and retain, save_cursor and
    forget_consumer; the reader may register cursors, never remove events; teardown drops
    them; setup of a feed registered without them adds them ('updated', not error 51053)."""
    for case in ("blocking_int", "outbox_trigger"):
        out = rendered[case]
        names = out["names"]
        q = {k: "[changefeed].[" + names[k] + "]" for k in names}
        for kind in ("retention", "consumer", "retain", "save_cursor", "forget_consumer"):
            assert kind in names, (case, kind)
            assert f"{q[kind]};" in out["teardown"], (case, kind)
        setup = out["setup"]
        reader = "[" + names["reader_role"] + "]"
        for granted in (f"grant execute on object::{q['save_cursor']} to {reader}",
                        f"grant execute on object::{q['forget_consumer']} to {reader}",
                        f"grant select on object::{q['retention']} to {reader}",
                        f"grant select on object::{q['consumer']} to {reader}"):  # fmt: skip
            assert granted in setup and granted in out["upgrade"], (case, granted)
        assert f"object::{q['retain']}" not in setup, "retain is the owner's only"
        # the names registered before retention (and snapshots) are accepted as the same feed
        registered = matrix.registered_names(setup)
        assert registered.keys() >= {"retention", "consumer", "retain", "save_cursor"}
        before = {k: v for k, v in registered.items() if k not in (
            "retention", "consumer", "pk_retention", "pk_consumer", "retain", "save_cursor",
            "forget_consumer", *REGISTERED_SNAPSHOT_KINDS)}  # fmt: skip
        legacy = json.dumps(before, sort_keys=True, separators=(", ", ": "))
        assert "convert(varbinary(max), N'" + legacy.replace("'", "''") + "')" in setup


def test_readers_below_the_horizon_fail_with_51062(rendered: dict[str, dict[str, Any]]) -> None:
    """C5: read_feed checks the horizon after it read its page (a retention run that
    committed during the read is seen) and before it returns it; save_cursor checks it
    before registering. The message names the cursor, the horizon and the fix."""
    for case in ("blocking_int", "outbox_trigger"):
        out = rendered[case]
        retention = "[changefeed].[" + out["names"]["retention"] + "]"
        read = _body(out["setup"], "create or alter procedure [changefeed].[read_feed:")
        check = read.index(
            f"select @horizon = horizon from {retention} where shard_id = @shard_id;"
        )
        last_read = max(read.rindex("from @page"), read.rindex("insert into @page"))
        assert read.rindex("insert into @page") < check < read.index("object_id(N'tempdb..#read')")
        assert last_read > check  # the page is returned after the check
        assert "throw 51062, @msg, 1;" in read[check:]
        for words in ("fell behind retention: its cursor ", "(up to ", "Re-snapshot"):
            assert words in read[check:], words
        save = _body(out["setup"], "create or alter procedure [changefeed].[save_cursor:")
        assert save.index("throw 51062") < save.index("insert into")
        assert "datalength(@cursor) <> 16" in save


def test_retain_serialises_runs_and_records_the_horizon_with_its_delete(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """retain: arguments checked (51063); each chunk's transaction takes the feed's
    retention applock, owned by the transaction, and updates the horizon before deleting;
    only events at or below the safe point and (unless overridden) the lowest cursor go."""
    retain = _body(
        rendered["blocking_int"]["setup"], "create or alter procedure [changefeed].[retain:"
    )
    assert retain.count("throw 51063") == 2
    lock = retain.index(
        "@Resource = N'changefeed/shop.orders/retention', @LockMode = N'Exclusive', "
        "@LockOwner = N'Transaction'"
    )
    horizon = retain.index(
        "update [changefeed].[retention:shop.orders] with (updlock, serializable)"
    )
    delete = retain.index("delete f\n            from [changefeed].[feed:shop.orders] as f")
    assert retain.index("begin transaction;") < lock < horizon < delete < retain.rindex("commit;")
    assert "when @override_consumers = 0 and @min_cursor < @safe_point then @min_cursor" in retain
    assert "ulid <= @upto and ulid < @before" in retain


# -- input validation and trusted writers (issue 14, item 2) ---------------------------------


def test_ulid_arguments_are_refused_unless_16_bytes(rendered: dict[str, dict[str, Any]]) -> None:
    """read_feed, barrier_check and save_cursor take their ULID as varbinary(max) (a
    binary(16) parameter pads or cuts silently) and refuse NULL or another length with
    51065 before using it; read_feed no longer reads NULL as the beginning."""
    for case in ("blocking_int", "outbox_trigger"):
        setup = rendered[case]["setup"]
        for routine, param in (("read_feed", "@cursor"), ("barrier_check", "@position"),
                               ("save_cursor", "@cursor")):  # fmt: skip
            body = _body(setup, f"create or alter procedure [changefeed].[{routine}:")
            assert f"{param} varbinary(max)" in body, (case, routine)
            check = body.index(f"if {param} is null or datalength({param}) <> 16")
            assert body.index("throw 51065", check) < body.index("binary(16), " + param + ")")
        read = _body(setup, "create or alter procedure [changefeed].[read_feed:")
        assert "isnull(@cursor" not in read and "f.ulid > @after" in read


def test_a_blocking_writers_rows_must_lie_in_its_shard_and_block(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """The guard trigger on a blocking feed table (none on an outbox feed's, where only
    the mover inserts): no write in progress -> 51010; a row of another shard or outside
    the write's block -> 51066 naming the row and the block."""
    setup = rendered["blocking_int"]["setup"]
    guard = _body(setup, "create or alter trigger [changefeed].[guard:shop.orders] on "
                         "[changefeed].[feed:shop.orders] after insert")  # fmt: skip
    assert guard.index("throw 51010") < guard.rindex("throw 51012") < guard.index("throw 51066")
    assert "where shard_id <> @shard_id or ulid < @first or ulid > @last;" in guard
    assert "where shard_id = @shard_id and session_id = @@spid and write_id = @write_id;" in guard
    assert "block_start + convert(bigint, 68719476735)" in guard
    upgrade = rendered["blocking_int"]["upgrade"]
    assert _body(upgrade, "create or alter trigger [changefeed].[guard:")
    assert "[guard:" not in rendered["outbox_int"]["setup"]


def _capture_check(sql: str) -> str:
    """capture_check's text as setup holds it, before the source's object_id is filled in."""
    body = _body(sql, "declare @ddl nvarchar(max) = replace(N'create or alter procedure")
    return _literal(body, "N'create or alter procedure [changefeed].[capture_check:")


def test_readers_at_the_head_fail_when_the_capture_is_lost(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Protocol O6 (PostgreSQL's CF011): read_feed of a capture: trigger feed calls
    capture_check at the head, before it looks at the outbox (a lost trigger leaves it
    empty). capture_check runs as its owner, since the reader role may not see the source's
    metadata; it refuses with 51068 a source whose trigger is gone or disabled, or whose
    object_id is not the one setup wrote into its text (dropped and re-created), and lets a
    missing source pass. Setup repairs a stale one; capture: none drops it; teardown too."""
    q = "[changefeed].[capture_check:shop.order_lines]"
    for section in ("setup", "upgrade"):
        sql = rendered["outbox_trigger"][section]
        check = _capture_check(sql)
        assert all_problems(check, f"outbox_trigger/{section}: capture_check") == []
        assert check.startswith(f"create or alter procedure {q}\nwith execute as owner\nas\n")
        assert "@recorded int = null," in check  # replaced by setup, below
        created = _body(sql, "declare @ddl nvarchar(max) = replace(N'create or alter procedure")
        assert (
            "N'@recorded int = null,', concat(N'@recorded int = ', "
            "object_id(N'[shop].[order_lines]', N'U'), N','));\nexec sp_executesql @ddl;" in created
        )
        lookups = check[check.index("if @source is null") : check.index("throw 51068")]
        assert "return;" in lookups  # a source that is gone loses no writes
        assert (
            "where t.object_id = object_id(N'[shop].[capture:changefeed.shop.order_lines]', N'TR')"
            " and t.parent_id = @source;" in lookups
        )
        assert lookups.count("sys.") == 1  # one catalog seek besides the two object_id()
        for cause in ("when @source <> @recorded", "when @disabled is null", "when @disabled = 1"):
            assert cause in lookups
        assert "of the feed shop.order_lines (capture: trigger)" in check
        assert "changefeed.setup_feed" in check and "re-emit the changes" in check
        read_feed = _body(sql, "create or alter procedure [changefeed].[read_feed:")
        called = read_feed.index(f"if @rows < @page_size\n        exec {q};")
        assert called < read_feed.index("-- At the head: move what has been committed")
        # created before read_feed, which calls it; the reader may ask it directly (status)
        read_feed_created = sql.index("[read_feed:shop.order_lines]\n")
        assert sql.index(f"create or alter procedure {q}") < read_feed_created
        assert f"grant execute on object::{q} to [changefeed_reader:shop.order_lines]" in sql
    repair = rendered["outbox_trigger"]["setup"]
    repair = repair[repair.index("-- A feed set up by a package without capture_check") :]
    repair = repair[: repair.index("set @action = N'repaired';")]
    assert f"object_id(N'{q}', N'P') is null\n    set @action = N'updated';" in repair
    assert (
        "isnull(charindex(concat(N'@recorded int = ', object_id(N'[shop].[order_lines]', N'U'),"
        f" N','),\n        object_definition(object_id(N'{q}', N'P'))), 0) = 0\n" in repair
    )
    # capture: none drops it; blocking feeds never call it; teardown drops it
    assert (
        "if object_id(N'[changefeed].[capture_check:shop.orders]', N'P') is not null\n"
        "    exec sp_executesql N'drop procedure [changefeed].[capture_check:shop.orders]';"
        in rendered["outbox_int"]["setup"]
    )
    for case in ("outbox_int", "blocking_int"):
        assert "exec [changefeed].[capture_check:" not in rendered[case]["setup"]
        assert "51068" not in rendered[case]["setup"]
    assert f"drop procedure {q};" in rendered["outbox_trigger"]["teardown"]


def test_the_client_names_capture_check_as_setup_does(rendered: dict[str, dict[str, Any]]) -> None:
    """capture_check is not in the registry's names: changefeed status derives its name by
    the same shortening rule, checked here against the rendered names, long ones too."""
    from changefeed.dialects.sqlserver.client import object_name

    cases = [c for c in matrix.CASES if "capture_check" in rendered[c]["names"]]
    assert "outbox_trigger_long_names" in cases
    for case in cases:
        feed_id = matrix.CASES[case]["feed_id"]
        assert object_name("capture_check", feed_id) == rendered[case]["names"]["capture_check"]


# -- snapshots (protocol 12) ----------------------------------------------------------------

SNAPSHOT_KINDS = ("snapshot", "snapshot_pk", "snapshot_begin", "snapshot_finish")
# The same objects as the registry stores them: the primary key under the key SQL Server
# feeds have always registered it with (_sqlserver_registry_names, macros/sqlserver/registry.sql).
REGISTERED_SNAPSHOT_KINDS = ("snapshot", "pk_snapshot", "snapshot_begin", "snapshot_finish")
BEGIN = "create or alter procedure [changefeed].[snapshot_begin:"


def test_snapshot_objects_are_created_granted_and_dropped(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Every feed gets the request table and snapshot_begin and snapshot_finish; the reader
    may call both and read the table; teardown drops them; setup of a feed registered
    without them (set up by a package with retention, before snapshots) adds them
    ('updated', not error 51053), as upgrade does."""
    for case in ("blocking_int", "outbox_trigger"):
        out = rendered[case]
        names = out["names"]
        q = {k: "[changefeed].[" + names[k] + "]" for k in SNAPSHOT_KINDS if k != "snapshot_pk"}
        reader = "[" + names["reader_role"] + "]"
        for section in ("setup", "upgrade"):
            sql = out[section]
            create = (
                f"if object_id(N'{q['snapshot']}', N'U') is null\n"
                f"    exec sp_executesql N'create table {q['snapshot']} ("
            )
            assert create in sql, (case, section)
            assert f"constraint [{names['snapshot_pk']}] primary key (snapshot_id)" in sql
            for granted in (f"grant select on object::{q['snapshot']}",
                            f"grant execute on object::{q['snapshot_begin']}",
                            f"grant execute on object::{q['snapshot_finish']}"):  # fmt: skip
                assert f"{granted} to {reader}" in sql, (case, section, granted)
            for kind in q:
                assert f"object::{q[kind]} to [{names['writer_role']}]" not in sql, (case, kind)
        for kind, what in (("snapshot_begin", "procedure"), ("snapshot_finish", "procedure"),
                           ("snapshot", "table")):  # fmt: skip
            assert f"drop {what} {q[kind]};" in out["teardown"], (case, kind)
        registered = matrix.registered_names(out["setup"])
        assert registered.keys() >= set(REGISTERED_SNAPSHOT_KINDS)
        before = {k: v for k, v in registered.items() if k not in REGISTERED_SNAPSHOT_KINDS}
        legacy = json.dumps(before, sort_keys=True, separators=(", ", ": "))
        assert "<> convert(varbinary(max), N'" + legacy.replace("'", "''") + "')" in out["setup"]


def test_snapshot_begin_reserves_an_empty_block_under_the_state_row_lock(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """12.1: arguments first (51070), outside any transaction (51071); then one short
    transaction that locks the state row (creating it if missing), allocates the block of
    section 3 with the time hint now, moves the state past it and records the request.
    No shard lock, no mover lock, no session row, no event."""
    for case, table in (("blocking_int", "shop.orders"), ("outbox_trigger", "shop.order_lines")):
        body = _body(rendered[case]["setup"], BEGIN)
        state, snapshot = f"[changefeed].[state:{table}]", f"[changefeed].[snapshot:{table}]"
        order = [
            "if @@trancount > 0\n        throw 51071",
            "if (@@options & 2) = 2\n        throw 51071",
            "if @shard_id is null\n        throw 51070",
            "if @key_from is not null",
            "if @key_to is not null",
            "begin transaction;",
            f"from {state} with (updlock, holdlock, rowlock)\n        where shard_id = @shard_id;",
            f"insert into {state} (shard_id, time, ulid_high, ulid_low, generation)",
            "set @t = sysutcdatetime();",
            "if @st_time is null or @t > @st_time",
            f"update {state}\n        set time = @b_time, ulid_high = @b_high,"
            " ulid_low = @b_start + convert(bigint, 68719476736)",
            f"set @snapshot_id = next value for [changefeed].[sequence:{table}];",
            f"insert into {snapshot} (",
            "convert(binary(16), @b_high + convert(binary(8),"
            " @b_start + convert(bigint, 68719476735)))",
            "commit;",
            "select @snapshot_id as snapshot_id, @first_ulid as first_ulid;",
        ]
        at = [body.index(part) for part in order]
        assert at == sorted(at), case
        for absent in ("sp_getapplock", "feed_write_lock", "[session:", "[feed:", "[outbox:"):
            assert absent not in body, (case, absent)


def test_snapshot_key_bounds_must_be_json_arrays_of_one_scalar_per_key_column(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """12.1 step 1: null, or an array (ISJSON and the first non-blank character) whose
    elements below the key's length are non-null scalars and which has no element after
    them (a strict path to it must fail with 13608); no OPENJSON, which needs
    compatibility level 130. The message names the accepted form."""
    for case, values, form in (
        ("blocking_int", 1, "a JSON array of 1 value (the key order_id)"),
        ("outbox_trigger", 3, "a JSON array of 3 values (the key tenant_id, sku, version)"),
    ):
        body = _body(rendered[case]["setup"], BEGIN)
        assert "openjson" not in body.lower()
        for param in ("@key_from", "@key_to"):
            check = body[body.index(f"if {param} is not null") :]
            check = check[: check.index("throw 51070, @msg, 1;")]
            nested = [f"if isjson({param}) = 1", f"substring({param}, patindex(", "= N'['"]
            nested += [f"json_value({param}, N'$[{i}]') is not null" for i in range(values)]
            nested += [f"set @probe = json_value({param}, N'strict $[{values}]');",
                       "if error_number() = 13608", "set @bad = 0;", "if @bad = 1"]  # fmt: skip
            at = [check.index(part) for part in nested]
            assert at == sorted(at), (case, param)
            assert f"N'$[{values}]') is not null" not in check
            assert f"{param} must be NULL or {form}, got '," in check, (case, param)


def test_snapshot_finish_finishes_once_and_refuses_unknown_requests(
    rendered: dict[str, dict[str, Any]],
) -> None:
    body = _body(rendered["blocking_int"]["setup"], BEGIN.replace("_begin:", "_finish:"))
    order = [
        "if @snapshot_id is null or @rows_landed is null or @rows_landed < 0\n        throw 51070",
        "set finished_at = sysutcdatetime(), rows_landed = @rows_landed\n"
        "    where snapshot_id = @snapshot_id and finished_at is null;\n"
        "    set @finished = case when @@rowcount = 1 then 1 else 0 end;",
        "if @finished = 0 and not exists (select 1 from [changefeed].[snapshot:shop.orders]"
        " where snapshot_id = @snapshot_id)",
        "N'changefeed: snapshot_finish on shop.orders: no snapshot request ',",
        "throw 51070, @msg, 1;",
        "select @finished as finished;",
    ]
    at = [body.index(part) for part in order]
    assert at == sorted(at)


def test_request_snapshot_sends_snapshot_begin_and_reads_the_block_back_as_hex(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """sqlserver__request_snapshot: the registry row through sp_executesql only where the
    registry exists; a plain exec of snapshot_begin (INSERT ... EXEC would wrap it in a
    transaction, which it refuses); the first ULID read back as hex (dbt's tables hold text)."""
    lookup, begin, first = rendered["outbox_trigger"]["operations"]
    assert lookup.startswith("declare @names nvarchar(max), @keys nvarchar(max),")
    assert (
        "if object_id(N'[changefeed].[feeds]', N'U') is not null\n    exec sp_executesql" in lookup
    )
    assert lookup.endswith("select @names as names, @keys as keys, @options as options;")
    assert begin == (
        "exec [changefeed].[snapshot_begin:shop.order_lines]\n    @shard_id = 3,\n"
        "    @key_from = N'[1]',\n    @key_to = null;"
    )
    assert first == (
        "select lower(convert(varchar(32), first_ulid, 2)) as first_ulid\n"
        "from [changefeed].[snapshot:shop.order_lines]\nwhere snapshot_id = 7;"
    )


def test_a_setup_that_would_drop_capture_unsaid_is_refused(dbt: Any) -> None:
    """An outbox feed's setup without `capture` in its arguments refuses (51073) to turn a
    registered capture: trigger off; `capture: none` stated, or capture: trigger, renders
    no such check (protocol 10; the PostgreSQL side: tests/test_pg_feed_setup.py)."""
    unsaid = matrix.spec("shop", "items", "outbox", matrix.INT_KEY)
    sql = _render_setup(dbt, {**unsaid, "stated": ["mode"]})
    assert "json_value(@options, N'$.capture') = N'trigger'" in sql
    assert "throw 51073, @msg, 1;" in sql
    # outbox_int and the other outbox cases of the matrix render it too, and their
    # statements parse (test_every_generated_statement_parses_and_names_what_it_means).
    said = _render_setup(dbt, {**unsaid, "stated": ["capture", "mode"]})
    kept = _render_setup(dbt, matrix.spec("shop", "items", "outbox", matrix.INT_KEY, shard="0"))
    assert "51073" not in said and "51073" not in kept


def _recapture(sql: str) -> tuple[str, str]:
    """The statement that creates the DDL trigger recapture, and the trigger's text as the
    statement holds it (before setup puts the capture trigger's text in)."""
    body = _body(sql, "declare @key_columns nvarchar(max), @ddl nvarchar(max), @recapture")
    return body, _literal(body, "N'create or alter trigger [recapture:")


def test_a_re_created_source_is_captured_by_a_ddl_trigger(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Protocol 5.1 on SQL Server: the database DDL trigger recapture (PostgreSQL's event
    trigger) fires on CREATE_TABLE and RENAME; when the statement made a table the source
    and that table lacks the capture trigger, it creates the trigger from the very text setup
    creates and records the table's object_id in capture_check, in the statement's
    transaction; a table that arrives with rows is refused (51074, CaptureLost). Setup and
    upgrade create it where the user may, capture: none drops it, teardown drops it first."""
    name = "[recapture:changefeed.shop.order_lines]"
    for section in ("setup", "upgrade"):
        body, template = _recapture(rendered["outbox_trigger"][section])
        assert all_problems(body, f"outbox_trigger/{section}: recapture") == []
        assert template.startswith(
            f"create or alter trigger {name}\non database\nwith execute as 'dbo'\n"
            "for create_table, rename\nas\n"
        )
        # as setup fills it in: the capture trigger's text where the placeholder is
        capture_text = _literal(body, "N'create or alter trigger [shop].[capture:")
        placeholder = "N'changefeed: the capture trigger at setup'"
        filled = template.replace(placeholder, "N'" + capture_text.replace("'", "''") + "'")
        assert filled != template
        assert all_problems(filled, f"outbox_trigger/{section}: recapture text") == []
        # only a statement whose table is now the source, and that lacks its trigger
        checks = template[template.index("declare @source") : template.index("throw 51074")]
        assert (
            "object_id(N'[shop].[order_lines]', N'U');\n    if @source is null\n        return;"
            in checks
        )
        for field in ("ObjectType", "SchemaName", "NewObjectName", "ObjectName"):
            assert f"(/EVENT_INSTANCE/{field})[1]" in checks
        assert "N'U'), 0) <> @source" in checks
        assert (
            "where t.object_id = object_id(N'[shop].[capture:changefeed.shop.order_lines]', N'TR')"
            " and t.parent_id = @source)\n        return;" in checks
        )
        assert "if exists (select 1 from [shop].[order_lines])\n        throw 51074" in template
        assert "would hold rows that no event records" in template
        # the capture trigger: setup's own text, put in where the placeholder is
        after = template[template.index("throw 51074") :]
        assert "exec sp_executesql N'changefeed: the capture trigger at setup';" in after
        assert (
            "set @recapture = replace(N'create or alter trigger [recapture:" in body
            and "N'N''changefeed: the capture trigger at setup''',\n"
            "    concat(N'N''', replace(@ddl, N'''', N''''''), N''''));"
            in body
        )
        capture = body[: body.index("set @recapture")]
        assert "set @ddl = replace(N'create or alter trigger [shop].[capture:" in capture
        # capture_check records the new table's object_id
        assert "replace(N'create or alter procedure [changefeed].[capture_check:" in after
        assert "N'@recorded int = null,', concat(N'@recorded int = ', @source, N','));" in after
        # created only by a user who may, and only when it is missing or stale
        assert (
            "if has_perms_by_name(null, N'DATABASE', N'ALTER ANY DATABASE DDL TRIGGER') = 1\n"
            "    and not exists (select 1 from sys.triggers as t where t.parent_class = 0"
            " and t.name = N'recapture:changefeed.shop.order_lines' and t.is_disabled = 0" in body
        )
        assert f"exec sp_executesql @recapture;\n    enable trigger {name} on database;" in body
    setup = rendered["outbox_trigger"]["setup"]
    repair = setup[setup.index("-- A feed set up by a package without capture_check") :]
    repair = repair[: repair.index("set @action = N'repaired';")]
    assert "t.parent_class = 0 and t.name = N'recapture:changefeed.shop.order_lines'" in repair
    dropped = "drop trigger [recapture:changefeed.shop.orders] on database"
    assert dropped in rendered["outbox_int"]["setup"]  # capture: none
    assert "recapture" not in rendered["blocking_int"]["setup"]
    teardown = rendered["outbox_trigger"]["teardown"]
    assert teardown.index(f"drop trigger {name} on database;") < teardown.index(
        "drop trigger [shop].[capture:"
    )
    from changefeed.errors import CaptureLost

    assert 51074 in CaptureLost.sqlserver_errors
