"""Static checks of generated T-SQL without a SQL Server: split out the SQL that
``exec sp_executesql N'...'`` runs, and parse everything with sqlfluff's ``tsql`` dialect.

sqlfluff is lenient (it is a linter, not SQL Server), so a clean parse does not prove that
SQL Server accepts a statement; an unparsable one, though, is certainly broken. The live
suite (``tests/sqlserver_live``) is what runs the SQL for real.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, NamedTuple


class Token(NamedTuple):
    """One token; a tuple, as the static checks make millions of them."""

    kind: str  # "word", "string", "other"
    text: str
    start: int


#: One token at a position (``re.X``): the named group says which; ``open`` is a string or
#: identifier that never closes, and ``block`` a block comment, which nests (scanned by
#: hand). Matching whole tokens keeps the static checks of the render matrix fast: a loop
#: over characters took about a third of tests/test_sqlserver_render.py's time.
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<line>--[^\n]*\n?)
    | (?P<block>/\*)
    | (?P<identifier>\[[^\]]*+(?:\]\][^\]]*+)*+\] | "[^"]*+(?:""[^"]*+)*+")
    | (?P<string>(?:(?<![\w@#$])[nN])?'[^']*+(?:''[^']*+)*+')
    | (?P<word>[\w@#$]+)
    | (?P<open>[\["'])
    | (?P<other>.)
    """,
    re.X | re.S,
)


def tokens(sql: str) -> list[Token]:
    """A T-SQL tokenizer just good enough to find string literals and words: it knows
    line and (nested) block comments, ``[bracketed]`` and ``"quoted"`` identifiers with
    doubled closing characters, and ``'...'``/``N'...'`` strings with doubled quotes."""
    out: list[Token] = []
    i, n = 0, len(sql)
    match = _TOKEN.match
    while i < n:
        found = match(sql, i)
        assert found is not None  # `other` matches any character
        kind, end = found.lastgroup, found.end()
        if kind == "block":
            depth = 1
            while depth:
                opening, closing = sql.find("/*", end), sql.find("*/", end)
                if closing < 0:
                    raise ValueError(f"unterminated block comment at {i}")
                if 0 <= opening < closing:
                    depth, end = depth + 1, opening + 2
                else:
                    depth, end = depth - 1, closing + 2
        elif kind == "open":
            what = "string" if sql[i] == "'" else "identifier"
            raise ValueError(f"unterminated {what} at {i}: {sql[i : i + 60]!r}")
        elif kind == "identifier" or kind == "other":
            out.append(Token("other", found.group(), i))
        elif kind in ("string", "word"):
            out.append(Token(kind, found.group(), i))
        i = end
    return out


def string_value(literal: str) -> str:
    """The value of a T-SQL string literal: ``N'it''s'`` -> ``it's``."""
    body = literal[1:] if literal[0] in "nN" else literal
    if not (body.startswith("'") and body.endswith("'")):
        raise ValueError(f"not a string literal: {literal[:40]!r}")
    return body[1:-1].replace("''", "'")


def executesql_bodies(sql: str) -> list[str]:
    """The statements that ``exec sp_executesql N'...'`` runs in ``sql``, and in them,
    recursively (depth first, in order)."""
    found: list[str] = []
    toks = tokens(sql)
    for a, b, c in zip(toks, toks[1:], toks[2:], strict=False):
        if (
            a.kind == "word"
            and a.text.lower() in ("exec", "execute")
            and b.kind == "word"
            and b.text.lower() == "sp_executesql"
            and c.kind == "string"
        ):
            body = string_value(c.text)
            found.append(body)
            found.extend(executesql_bodies(body))
    return found


#: SQL Server's bracketed identifier: ``[`` then anything, ``]`` doubled, then ``]``.
BRACKETED_IDENTIFIER = r"\[(?:[^\]]|\]\])*\]"


def patch_sqlfluff_tsql() -> None:
    r"""Teach sqlfluff's tsql dialect SQL Server's rule for bracketed identifiers.

    sqlfluff (4.5) lexes ``[...]`` as ``\[([^\[\]]*)*\]``: no ``]]`` escape and no ``[``
    inside, so the valid ``[a]]b]`` (the name ``a]b``) is unparsable; and it accepts a
    function name in ``drop function`` only if it is a plain word, so ``[ulid:shop.orders]``
    is unparsable there. Both are exactly what hostile names exercise. This replaces the two
    patterns with SQL Server's rule (anything, with ``]`` doubled), nothing else. A wrongly
    escaped name such as ``[a]b]`` still fails to parse (see test_sqlserver_render.py).

    It also lacks the ``COMMIT [TRAN | TRANSACTION] [name] WITH (DELAYED_DURABILITY = {ON |
    OFF})`` form of SQL Server 2014+, which the lock call's commit uses, and ``ALTER TABLE
    <name> SET (LOCK_ESCALATION = {AUTO | TABLE | DISABLE})``, which setup runs on the hot
    tables; those two forms are added, nothing else around them.
    Idempotent; must run before the first tsql Linter is built.
    """
    from importlib import import_module

    from sqlfluff.core.dialects import load_raw_dialect
    from sqlfluff.core.parser import (
        BaseSegment,
        Bracketed,
        CodeSegment,
        OneOf,
        Ref,
        RegexLexer,
        RegexParser,
        SegmentGenerator,
        Sequence,
    )

    dialect = load_raw_dialect("tsql")
    if getattr(dialect, "_changefeed_patched", False):
        return
    dialect.patch_lexer_matchers(
        [
            RegexLexer(
                "square_quote",
                BRACKETED_IDENTIFIER,
                CodeSegment,
                segment_kwargs={"quoted_value": (r"\[((?:[^\]]|\]\])*)\]", 1)},
            )
        ]
    )
    original: Any = dialect._library["FunctionNameIdentifierSegment"]

    def function_name(d: Any) -> Any:
        parser: Any = original.expand(d)
        return RegexParser(
            r"[A-Z][A-Z0-9_]*|" + BRACKETED_IDENTIFIER,
            CodeSegment,
            type="function_name_identifier",
            anti_template=parser.anti_template,
        )

    dialect.replace(FunctionNameIdentifierSegment=SegmentGenerator(function_name))

    transaction: Any = dialect._library["TransactionStatementSegment"]

    class TransactionStatementSegment(BaseSegment):  # type: ignore[misc]
        type = "transaction_statement"
        match_grammar = OneOf(
            Sequence(
                "COMMIT",
                Ref("TransactionGrammar", optional=True),
                Ref("SingleIdentifierGrammar", optional=True),
                "WITH",
                Bracketed("DELAYED_DURABILITY", Ref("EqualsSegment"), OneOf("ON", "OFF")),
            ),
            transaction.match_grammar,
        )

    alter_table: Any = dialect._library["AlterTableStatementSegment"]

    class AlterTableStatementSegment(BaseSegment):  # type: ignore[misc]
        type = "alter_table_statement"
        match_grammar = OneOf(
            Sequence(
                "ALTER",
                "TABLE",
                Ref("TableReferenceSegment"),
                "SET",
                Bracketed(
                    "LOCK_ESCALATION", Ref("EqualsSegment"), OneOf("AUTO", "TABLE", "DISABLE")
                ),
                Ref("DelimiterGrammar", optional=True),
            ),
            alter_table.match_grammar,
        )

    dialect.sets("unreserved_keywords").add("LOCK_ESCALATION")
    # load_raw_dialect re-registers the module's segment classes on every call, so the
    # module must hold the replacements too.
    module: Any = import_module(transaction.__module__)
    module.TransactionStatementSegment = TransactionStatementSegment
    module.AlterTableStatementSegment = AlterTableStatementSegment
    dialect.replace(
        TransactionStatementSegment=TransactionStatementSegment,
        AlterTableStatementSegment=AlterTableStatementSegment,
    )
    dialect._changefeed_patched = True  # type: ignore[attr-defined]


@lru_cache(maxsize=1)
def _linter() -> Any:
    from sqlfluff.core import FluffConfig, Linter

    patch_sqlfluff_tsql()
    # The raw templater: generated T-SQL is not a Jinja template (and it is ~40% faster).
    return Linter(config=FluffConfig(overrides={"dialect": "tsql", "templater": "raw"}))


_parse_cache: dict[str, list[str]] = {}


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()


def shape(sql: str) -> str:
    """``sql`` with every ``[identifier]``/``"identifier"`` replaced by ``[x]`` and every
    string literal by ``'x'`` (``N'x'``), as cut by :func:`tokens`; raises ``ValueError``
    where :func:`tokens` does.

    sqlfluff lexes each of those as one token whatever it holds, so a statement parses
    exactly when its shape does: the matrix's cases differ mostly in names and literals,
    and their ~770 distinct statements have ~110 distinct shapes. What a literal or an
    identifier holds is checked elsewhere: sp_executesql bodies are parsed on their own
    (:func:`every_statement`), and the render tests decode every identifier. A quoting
    mistake (``[a]b]``, ``N'it's'``) changes the tokens, hence the shape, and still fails.
    """
    parts: list[str] = []
    last = 0
    for token in tokens(sql):
        if token.kind == "string":
            canonical = "N'x'" if token.text[0] in "nN" else "'x'"
        elif token.text[0] in '["':
            canonical = "[x]"
        else:
            continue
        parts += [sql[last : token.start], canonical]
        last = token.start + len(token.text)
    parts.append(sql[last:])
    return "".join(parts)


def _shape_or_self(sql: str) -> str:
    try:
        return shape(sql)
    except ValueError:  # a tokenizer error: parse the text itself (all_problems reports it)
        return sql


def parse_problems(sql: str) -> list[str]:
    """sqlfluff tsql parse problems of ``sql`` (empty when it parses); cached by shape.

    A statement whose shape does not parse is parsed again as written, so that the
    problems name its own lines and text."""
    shaped = _shape_or_self(sql)
    digest = _digest(shaped)
    problems = _parse_cache.get(digest)
    if problems is None:
        problems = _parse_cache[digest] = _parse(shaped)
    if problems and shaped != sql:
        return _parse(sql) or problems
    return problems


def _parse(sql: str) -> list[str]:
    parsed = _linter().parse_string(sql)
    problems = [str(v.desc() if hasattr(v, "desc") else v) for v in parsed.violations]
    if parsed.tree is None:
        problems.append("sqlfluff produced no parse tree")
    else:
        for segment in parsed.tree.recursive_crawl("unparsable"):
            line, pos = segment.pos_marker.source_position() if segment.pos_marker else (0, 0)
            problems.append(f"unparsable at line {line}, position {pos}: {segment.raw[:120]!r}")
    return problems


def every_statement(sql: str) -> list[str]:
    """``sql`` and every statement it runs through sp_executesql (empty on a tokenizer
    error, which all_problems reports)."""
    try:
        return [sql, *executesql_bodies(sql)]
    except ValueError:
        return [sql]


def warm_parse_cache(sqls: Iterable[str], workers: int | None = None) -> int:
    """Parse the distinct statements among ``sqls`` (and what they run through
    sp_executesql) in parallel worker processes and fill the cache, so that the checks
    that follow only look results up. Returns how many distinct shapes were parsed."""
    todo: dict[str, str] = {}
    for sql in sqls:
        for statement in every_statement(sql):
            shaped = _shape_or_self(statement)
            digest = _digest(shaped)
            if digest not in _parse_cache:
                todo.setdefault(digest, shaped)
    if not todo:
        return 0
    workers = workers or min(len(todo), os.cpu_count() or 1, 4)
    if workers <= 1:
        for digest, statement in todo.items():
            _parse_cache[digest] = _parse(statement)
        return len(todo)
    # Longest first: the big procedures dominate, so start them early.
    ordered = sorted(todo.items(), key=lambda item: -len(item[1]))
    context = multiprocessing.get_context("spawn")  # dbt may have threads; do not fork them
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        results = pool.map(_parse, [statement for _, statement in ordered], chunksize=1)
        for (digest, _), problems in zip(ordered, results, strict=True):
            _parse_cache[digest] = problems
    return len(todo)


def all_problems(sql: str, label: str) -> list[str]:
    """Parse ``sql`` and every statement it runs through sp_executesql; problems are
    prefixed with where they were found. Never raises: a tokenizer error is a problem."""
    problems = [f"{label}: {p}" for p in parse_problems(sql)]
    try:
        bodies = executesql_bodies(sql)
    except ValueError as exc:  # an unterminated literal or identifier
        return [*problems, f"{label}: {exc}"]
    for i, body in enumerate(bodies, 1):
        first = body.strip().splitlines()[0][:80] if body.strip() else "<empty>"
        problems += [f"{label} / sp_executesql #{i} ({first}): {p}" for p in parse_problems(body)]
    return problems
