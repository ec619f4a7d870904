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
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import sqlserver_matrix as matrix
from tests.dbtkit import INTEGRATION_TESTS, REPO_ROOT, DbtError, DbtHarness
from tests.sqlserver_tsql import (
    all_problems,
    executesql_bodies,
    parse_problems,
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
    parsed = warm_parse_cache(sqls)
    print(f"\nsqlserver render matrix: {len(out)} cases, {parsed} distinct statements parsed")
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
        expected |= {spec["schema"], "feeds", "pk:feeds", "precision", "scale"}
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
    # the procedures are exactly the ones upgrade re-creates
    creates = [b for b in executesql_bodies(setup) if b.startswith("create or alter")]
    assert creates == [b for b in executesql_bodies(out["upgrade"]) if b.startswith("create")]


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
    # sqlfluff's own tsql lexer rejects `]]` inside brackets; tests/sqlserver_tsql.py
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
