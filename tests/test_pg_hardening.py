"""Hardening of PostgreSQL feeds against misuse found in acceptance testing: routines that
run with the caller's rights use only qualified operators and functions, public routines
refuse null or malformed arguments, the bookkeeping tables stay bounded, blocking writers
cannot publish outside their block, and schema changes under capture: trigger stop writes
instead of capturing wrong keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from tests.pg_feed_support import (
    RENDER_SPEC,
    as_role,
    connect,
    create_table,
    registry_row,
    setup_feed,
    teardown_feed,
)

from changefeed.client import PostgresFeed

pytestmark = pytest.mark.postgres

CAPTURE = "'protocol_version': 2, 'capture': 'trigger', 'shard': '(id % 3)'"

# Words that look like calls but are SQL or PL/pgSQL syntax, not function lookups.
_SYNTAX = frozenset(
    [
        "coalesce",
        "nullif",
        "greatest",
        "least",
        "exists",
        "in",
        "any",
        "all",
        "values",
        "array",
        "and",
        "or",
        "not",
        "then",
        "else",
        "when",
        "if",
        "elsif",
        "return",
        "select",
        "from",
        "where",
        "using",
        "into",
        "as",
        "perform",
        "raise",
        "exception",
        "loop",
        "row",
        "is",
        "null",
        "case",
    ]
)


@pytest.fixture(scope="module")
def admin(pg_uri: str) -> Iterator[psycopg.Connection[Any]]:
    conn = connect(pg_uri)
    yield conn
    conn.close()


def _routine_bodies(text: str) -> list[tuple[str, str]]:
    """(header, body) of every routine created by the rendered statements."""
    out = []
    for statement in text.split("\n;;\n"):
        head = re.match(r"\s*create or replace (function|procedure) (\S+?)\(", statement)
        if head is None:
            continue
        tag = re.search(r"\nas (\$[a-z0-9]*\$)\n", statement)
        assert tag is not None, statement[:200]
        header = statement[: tag.start()]
        body = statement[tag.end() : statement.rindex(tag.group(1))]
        out.append((header, body))
    return out


def _unqualified(body: str) -> list[str]:
    """Operators and function calls that the caller's search_path could resolve."""
    code = re.sub(r"--[^\n]*", " ", body)
    code = re.sub(r"E?'(?:[^']|'')*'", " '' ", code)  # string literals
    quoted = r'"(?:[^"]|"")*"'
    code = re.sub(quoted + r"\s*\.\s*" + quoted, " cf_qualified ", code)
    code = re.sub(quoted, " cf_quoted ", code)
    code = re.sub(r"operator\(pg_catalog\.[^)\s]+\)", " ", code, flags=re.I)
    found = []
    # RAISE ... USING x = ... and GET DIAGNOSTICS v = item are syntax, not operators.
    syntax = re.sub(r"\b(errcode|message|hint|detail)\s*=", " ", code)
    syntax = re.sub(r"\bdiagnostics\s+\w+\s*=", " ", syntax)
    syntax = syntax.replace(":=", " ").replace("::", " ")
    found += re.findall(r"[-+*/<>=~!@#%^&|`?]+", syntax)
    # Constructs that look up `=` (or another operator) by name, like a bare operator.
    found += re.findall(r"\b(?:distinct\s+from|between|i?like|similar\s+to|in\s*\()", code, re.I)
    for name in re.findall(r"(?<![.\w])([A-Za-z_]\w*)\s*\(", code):
        if name.lower() not in _SYNTAX and name != "cf_qualified":
            found.append(name + "(")
    return found


def test_caller_rights_routines_qualify_every_operator_and_function(dbt: Any) -> None:
    """A routine without a pinned search_path (lock, ulid: SECURITY INVOKER for speed or
    because it commits) resolves names through the caller's search_path: every operator
    must be OPERATOR(pg_catalog.x) and every function schema-qualified."""
    rendered = dbt.render_many(
        [
            "{% for s in changefeed._postgres_feed_statements("
            + spec
            + ") %}{{ s }}\n;;\n{% endfor %}"
            for spec in (
                RENDER_SPEC.replace("MODE", "'blocking'"),
                RENDER_SPEC.replace("MODE", "'outbox'").replace("'protocol_version': 2", CAPTURE),
            )
        ],
        "postgres",
    )
    checked = []
    for text in rendered:
        for header, body in _routine_bodies(text):
            if "set search_path = pg_catalog, pg_temp" in header:
                continue
            assert "security definer" not in header
            checked.append(header.split("(")[0].split('"changefeed".')[-1])
            assert _unqualified(body) == [], (header.splitlines()[0], _unqualified(body))
    assert {'"lock:cf_render.t"', '"ulid:cf_render.t"'} <= set(checked), checked


EVIL_OPERATORS = [
    ("=", "text", "boolean"),
    ("<>", "text", "boolean"),
    ("||", "text", "text"),
    ("||", "bytea", "bytea"),
    ("=", "bigint", "boolean"),
    ("<>", "bigint", "boolean"),
    ("<", "bigint", "boolean"),
    (">=", "bigint", "boolean"),
    ("+", "bigint", "bigint"),
    ("-", "bigint", "bigint"),
]


def test_a_callers_own_operators_never_run_inside_lock_or_ulid(
    dbt: Any, admin: psycopg.Connection[Any], pg_uri: str
) -> None:
    """A writer whose search_path puts its own schema before pg_catalog, holding exact-match
    operators there, writes through lock, ulid and update_state without running them."""
    create_table(admin, "cf_hard", "evil", "order_id bigint primary key")
    teardown_feed(dbt, "cf_hard", "evil")
    setup_feed(dbt, "cf_hard", "evil", "blocking")
    row = registry_row(admin, "cf_hard.evil")
    assert row is not None
    names = row["names"]
    admin.execute("drop schema if exists cf_evil_ops cascade")
    admin.execute("drop role if exists cf_evil")
    admin.execute("create role cf_evil")
    admin.execute(f'grant "{names["writer_role"]}" to cf_evil')
    admin.execute("create schema cf_evil_ops authorization cf_evil")
    with as_role(admin, "cf_evil"):
        for i, (op, arg, result) in enumerate(EVIL_OPERATORS):
            admin.execute(
                f"create function cf_evil_ops.f{i}({arg}, {arg}) returns {result} language plpgsql "
                "as $$begin raise exception 'cf_evil operator ran'; end$$"
            )
            admin.execute(
                f"create operator cf_evil_ops.{op} (leftarg = {arg}, rightarg = {arg}, "
                f"function = cf_evil_ops.f{i})"
            )
    feed = PostgresFeed("cf_hard.evil")
    try:
        with connect(pg_uri) as conn:
            feed.info(conn)  # the client reads the registry with the default search_path
            conn.execute("set role cf_evil")
            conn.execute("set search_path = cf_evil_ops, pg_catalog")
            # The trap works: an unqualified operator in this session runs the role's own.
            with pytest.raises(psycopg.errors.RaiseException, match="cf_evil operator ran"):
                conn.execute("select 1::bigint < 2::bigint")
        with connect(pg_uri) as conn:
            feed.info(conn)
            conn.execute("set role cf_evil")
            conn.execute("set search_path = cf_evil_ops, pg_catalog")
            with feed.write(conn, 0) as w:
                assert w.insert_events([(1,), (2,)]) == 2
        with connect(pg_uri) as conn:
            keys = conn.execute(f'select order_id from changefeed."{names["feed"]}" order by ulid')
            assert [k for (k,) in keys] == [1, 2]
    finally:
        admin.execute("drop schema cf_evil_ops cascade")
        admin.execute("drop owned by cf_evil")
        admin.execute("drop role cf_evil")
