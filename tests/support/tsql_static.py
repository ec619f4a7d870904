"""Static checks for classes of T-SQL defects that parse fine but misbehave on a server,
run by tests/test_sqlserver_render.py over every batch of the render matrix and over
every statement those batches run through ``exec sp_executesql``. Each check returns the
problems it found (empty: none); each has a test that feeds it a deliberately broken
rendering.

* literal typing: an integer literal above 2^31 - 1 is ``decimal`` in T-SQL, not
  ``bigint``, so ``@bigint + 68719476735`` is ``numeric(20, 0)`` and
  ``convert(binary(8), ...)`` of it gives SQL Server's numeric layout instead of eight
  big-endian bytes. Such a literal may stand only as ``convert(bigint, N)``, or alone on
  one side of a comparison or an assignment (which convert exactly), never next to an
  arithmetic operator.
* batch options: every setup, upgrade and teardown batch starts with the SET options that
  the objects it creates keep (QUOTED_IDENTIFIER, ANSI_NULLS; ANSI_PADDING for columns)
  and that make errors abort it (XACT_ABORT), whatever the client's defaults.
* lock escalation: the tables every writer and reader touches have it disabled, so one
  big statement cannot lock the whole table (READPAST skips row locks only).
* schema owner: ``create schema`` names its owner, so that the objects in it are not owned
  by whichever user happened to deploy (ownership chains need one owner).
* catch-all predicates: ``@p is null or column = @p`` makes one plan that scans the table.
* session-owned applocks: only the blocking writer's lock procedure takes one (the shard
  lock, which outlives its transactions by design). Anywhere else an interrupted call
  leaves it held for the connection's life; a transaction-owned lock is given back by the
  rollback (review #17).
* schema binding: every function is ``with schemabinding``; otherwise SQL Server assumes it
  reads data (serial plans, a Halloween spool under ``insert ... select f()``; review #28).
* sequence defaults: no ``insert`` into a table whose column defaults to
  ``next value for`` (the outbox) has UNION, DISTINCT, EXCEPT or INTERSECT, which
  NEXT VALUE FOR is documented to refuse (error 11721; review #24).
"""

from __future__ import annotations

from tests.support.tsql import Token, every_statement, tokens

INT_MAX = 2**31 - 1

#: The options every batch sets before anything else: ON, then OFF.
BATCH_OPTIONS_ON = frozenset(
    {
        "nocount",
        "xact_abort",
        "ansi_nulls",
        "ansi_padding",
        "ansi_warnings",
        "arithabort",
        "concat_null_yields_null",
        "quoted_identifier",
    }
)
BATCH_OPTIONS_OFF = frozenset({"numeric_roundabort"})

#: The kinds of table (the `kind:` of their names) that must not escalate locks.
HOT_TABLES = ("state", "feed", "outbox", "session")

_COMPARISON = frozenset("<>=!")  # and `=` of an assignment, which converts too
_ARITHMETIC = frozenset("+-*/%&|^")


def literal_typing_problems(sql: str, label: str) -> list[str]:
    """Integer literals above 2^31 - 1 outside ``convert(bigint, N)`` and comparisons."""
    problems = []
    for statement in every_statement(sql):
        toks = tokens(statement)
        for i, tok in enumerate(toks):
            if not (tok.kind == "word" and tok.text.isdigit() and int(tok.text) > INT_MAX):
                continue
            if not _in_arithmetic(toks, i) and (
                _is_bigint_conversion(toks, i) or _is_compared(toks, i)
            ):
                continue
            context = " ".join(t.text for t in toks[max(0, i - 4) : i + 3])
            problems.append(
                f"{label}: the integer literal {tok.text} is decimal in T-SQL, not bigint "
                f"(in: {context}); write convert(bigint, {tok.text})"
            )
    return problems


def _words(toks: list[Token], start: int, stop: int) -> list[str]:
    return [t.text.lower() for t in toks[max(0, start) : max(0, stop)]]


def _is_bigint_conversion(toks: list[Token], i: int) -> bool:
    return _words(toks, i - 4, i) == ["convert", "(", "bigint", ","] and _words(
        toks, i + 1, i + 2
    ) == [")"]


def _in_arithmetic(toks: list[Token], i: int) -> bool:
    before = toks[i - 1].text if i > 0 else ""
    after = toks[i + 1].text if i + 1 < len(toks) else ""
    return before in _ARITHMETIC or after in _ARITHMETIC


def _is_compared(toks: list[Token], i: int) -> bool:
    before = toks[i - 1].text if i > 0 else ""
    after = toks[i + 1].text if i + 1 < len(toks) else ""
    return before in _COMPARISON or after in _COMPARISON


def batch_option_problems(sql: str, label: str) -> list[str]:
    """The leading ``set`` statements of a batch must set BATCH_OPTIONS_ON on and
    BATCH_OPTIONS_OFF off before its first other statement."""
    on: set[str] = set()
    off: set[str] = set()
    toks = tokens(sql)
    i = 0
    while i < len(toks) and toks[i].text.lower() == "set":
        end = next((j for j in range(i, len(toks)) if toks[j].text == ";"), len(toks))
        words = [t.text.lower() for t in toks[i + 1 : end] if t.text != ","]
        if words and words[-1] in ("on", "off"):
            (on if words[-1] == "on" else off).update(words[:-1])
        i = end + 1
    problems = []
    if missing := sorted(BATCH_OPTIONS_ON - on):
        problems.append(f"{label}: the batch does not start with set {', '.join(missing)} on")
    if missing := sorted(BATCH_OPTIONS_OFF - off):
        problems.append(f"{label}: the batch does not start with set {', '.join(missing)} off")
    return problems


def lock_escalation_problems(sql: str, label: str, table_names: dict[str, str]) -> list[str]:
    """Every hot table the batch creates (``table_names``: kind -> quoted two-part name)
    has ``alter table <it> set (lock_escalation = disable)`` in the same batch."""
    statements = [" ".join(t.text.lower() for t in tokens(s)) for s in every_statement(sql)]
    problems = []
    for kind in HOT_TABLES:
        name = table_names.get(kind)
        if name is None:
            continue
        quoted = " ".join(t.text.lower() for t in tokens(name))
        if not any(s.startswith(f"create table {quoted} (") for s in statements):
            continue
        wanted = f"alter table {quoted} set ( lock_escalation = disable )"
        if not any(s.startswith(wanted) for s in statements):
            problems.append(f"{label}: {name} is created without set (lock_escalation = disable)")
    return problems


def schema_owner_problems(sql: str, label: str) -> list[str]:
    """Every ``create schema`` says ``authorization <owner>``."""
    problems = []
    for statement in every_statement(sql):
        toks = tokens(statement)
        for i, tok in enumerate(toks[:-1]):
            if tok.text.lower() == "create" and toks[i + 1].text.lower() == "schema":
                rest = [t.text.lower() for t in toks[i + 2 : i + 4]]
                if len(rest) < 2 or rest[1] != "authorization":
                    problems.append(
                        f"{label}: create schema {toks[i + 2].text if i + 2 < len(toks) else ''}"
                        " names no owner (authorization dbo)"
                    )
    return problems


def catch_all_problems(sql: str, label: str) -> list[str]:
    """No ``@p is null or column = @p``: one cached plan for such a catch-all predicate
    scans the whole table, and under locking READ COMMITTED waits for every row's locks."""
    problems = []
    for statement in every_statement(sql):
        words = [t.text.lower() for t in tokens(statement)]
        for i in range(len(words) - 6):
            variable = words[i]
            if (
                variable.startswith("@")
                and words[i + 1 : i + 4] == ["is", "null", "or"]
                and words[i + 5] == "="
                and words[i + 6] == variable
            ):
                problems.append(
                    f"{label}: catch-all predicate {' '.join(words[i : i + 7])}; "
                    "write one statement per case"
                )
    return problems


def session_applock_problems(sql: str, label: str) -> list[str]:
    """``sp_getapplock ... @LockOwner = N'Session'`` only inside ``[lock:...]`` procedures."""
    problems = []
    for statement in every_statement(sql):
        toks = tokens(statement)
        words = [t.text.lower() for t in toks]
        if words[:4] != ["create", "or", "alter", "procedure"] or len(toks) < 7:
            continue
        name = toks[6].text  # create or alter procedure [schema] . [name]
        for i, word in enumerate(words):
            if word != "sp_getapplock":
                continue
            end = words.index(";", i) if ";" in words[i:] else len(words)
            args = words[i:end]
            for j in range(len(args) - 2):
                owner = args[j + 2]
                if (
                    args[j : j + 2] == ["@lockowner", "="]
                    and owner == "n'session'"
                    and not name.lower().startswith("[lock:")
                ):
                    problems.append(
                        f"{label}: {name} takes a session-owned applock; an interrupted "
                        "call keeps it for the connection's life: take it transaction-owned "
                        "in a short transaction"
                    )
    return problems


def schemabinding_problems(sql: str, label: str) -> list[str]:
    """Every ``create [or alter] function`` says ``with schemabinding`` before its ``as``."""
    problems = []
    for statement in every_statement(sql):
        words = [t.text.lower() for t in tokens(statement)]
        for i in range(len(words) - 1):
            if words[i] == "create" and "function" in words[i + 1 : i + 4]:
                head = words[i : words.index("as", i) if "as" in words[i:] else len(words)]
                if head[-2:] != ["with", "schemabinding"]:
                    problems.append(
                        f"{label}: function {' '.join(head[:6])} ... is not schema-bound; "
                        "add with schemabinding before as"
                    )
    return problems


def sequence_default_problems(sql: str, label: str, table: str) -> list[str]:
    """No ``insert into <table>`` (quoted two-part name) statement with a set operator or
    DISTINCT: ``table`` has a ``next value for`` default."""
    quoted = [t.text.lower() for t in tokens(table)]
    problems = []
    for statement in every_statement(sql):
        words = [t.text.lower() for t in tokens(statement)]
        for i in range(len(words) - 1 - len(quoted)):
            if (
                words[i : i + 2] != ["insert", "into"]
                or words[i + 2 : i + 2 + len(quoted)] != quoted
            ):
                continue
            end = words.index(";", i) if ";" in words[i:] else len(words)
            found = sorted({"union", "distinct", "except", "intersect"} & set(words[i:end]))
            if found:
                problems.append(
                    f"{label}: insert into {table} uses {', '.join(found)}, which NEXT VALUE FOR "
                    "(its default) refuses (error 11721); stage the rows in a table variable"
                )
    return problems
