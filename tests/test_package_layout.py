"""The rules of the package layout, checked on the source (issue "Renovation", item 4).

* No module imports a private module (``_name``) of another package: a package exports
  what others need from its ``__init__`` or a public module.
* ``changefeed.cli`` imports nothing of the demo (``examples/shop/shop_demo`` uses the
  CLI, never the reverse), and no module of the package imports the demo.
* ``changefeed status`` and ``changefeed barrier`` start without PySpark, so they work
  with only the ``postgres`` extra installed.
* ``macros/postgres`` and ``macros/sqlserver`` hold the same file names, at most 15, each
  listed in docs/contributing.md's map (item 2).
* No module of ``python/changefeed`` takes part in an import cycle, counting imports inside
  functions (they run too, only later) but not ``if TYPE_CHECKING:`` blocks (they never
  run); every exception class of the package derives from ``changefeed.ChangefeedError``.
* The local environment (the local Spark, its jars, the shared catalog, the embedded
  PostgreSQL) is one package, ``changefeed.local`` (issue 29); the top level keeps the
  root's own modules and the former paths of ``changefeed.local``'s modules, each only an
  alias that re-exports the new module's names and warns.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import run_without_pyspark

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "python"
#: The former paths of public modules that moved (the local environment's, and the two
#: clients' into their dialects), each a deprecated alias of its new path until the next
#: release (CHANGELOG.md, Deprecated).
ALIASES = {
    "changefeed.client.postgres": "changefeed.dialects.postgres.client",
    "changefeed.client.sqlserver": "changefeed.dialects.sqlserver.client",
    "changefeed.catalog": "changefeed.local.catalog",
    "changefeed.catalog_tables": "changefeed.local.catalog_tables",
    "changefeed.embedded_postgres": "changefeed.local.embedded_postgres",
    "changefeed.local_spark": "changefeed.local.spark",
}


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def modules() -> Iterator[tuple[str, str, Path]]:
    """(module, its package, file) of every module of python/changefeed."""
    for path in sorted((ROOT / "changefeed").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
            yield ".".join(parts), ".".join(parts), path
        else:
            yield ".".join(parts), ".".join(parts[:-1]), path


def imported_modules() -> Iterator[str]:
    """The modules of python/changefeed that the suite imports: not ``__main__`` (it runs
    the CLI) and not the deprecated aliases (they warn; their own test imports them)."""
    for name, _package, _path in modules():
        if not name.endswith("__main__") and name not in ALIASES:
            yield name


def public_names(path: Path) -> set[str]:
    """The public names that the module's own top-level statements define."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


def imported(package: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of every import; ``from x import _y`` counts as importing ``x._y``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, f"{base}.{alias.name}"


def module_edges(name: str, package: str, tree: ast.AST, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports when it runs: ``from p import m``
    is an edge to the module ``p.m`` when there is one, else to ``p``."""
    edges: set[str] = set()
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for child in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                edges.update([target] if target in known else [base] if base in known else [])
    edges.discard(name)
    return edges


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def owner_of_private(module: str) -> str | None:
    """The package a private module belongs to (``a.b`` for ``a.b._c.d``), else None."""
    private = private_root(module)
    return None if private is None else private.rsplit(".", 1)[0]


def private_root(module: str) -> str | None:
    """The outermost private module on the path (``a.b._c`` for ``a.b._c.d``), else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[: i + 1])
    return None


def test_the_rules_see_every_module() -> None:
    names = {name for name, _package, _path in modules()}
    expected = {"changefeed.cli", "changefeed.client.core", "changefeed.spark.source._read_range"}
    assert expected <= names


def test_owner_of_private() -> None:
    assert owner_of_private("changefeed.spark.source._read_range") == "changefeed.spark.source"
    assert owner_of_private("changefeed.client.core") is None
    assert private_root("changefeed.ulid._codec.x") == "changefeed.ulid._codec"


def test_no_module_imports_another_packages_private_module() -> None:
    problems = []
    for name, package, path in modules():
        for line, target in imported(package, ast.parse(path.read_text(), str(path))):
            owner, private = owner_of_private(target), private_root(target)
            if owner is None or private is None or not target.startswith("changefeed"):
                continue
            inside = name == private or name.startswith(private + ".")
            if owner != package and not inside:
                problems.append(
                    f"{path.relative_to(REPO)}:{line}: {name} imports {target}, a private "
                    f"module of {owner}; export what is needed from {owner} instead"
                )
    assert not problems, "\n".join(problems)


def test_import_cycles_are_found() -> None:
    """The check below would pass vacuously if the finder found nothing."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import q\n"
        "def f():\n    from p import r\nfrom . import s\nimport p.t\n"
    )
    known = {"p", "p.q", "p.r", "p.s", "p.t"}
    assert module_edges("p.m", "p", tree, known) == {"p.r", "p.s", "p.t"}


def test_no_module_takes_part_in_an_import_cycle() -> None:
    found = list(modules())
    known = {name for name, _package, _path in found}
    graph = {
        name: module_edges(name, package, ast.parse(path.read_text(), str(path)), known)
        for name, package, path in found
    }
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(
        " <-> ".join(cycle) + ": move what both need into a module below them" for cycle in cycles
    )


def test_every_exception_of_the_package_derives_from_the_one_root() -> None:
    from changefeed import ChangefeedError

    classes, strays = [], []
    for name in imported_modules():
        for value in vars(importlib.import_module(name)).values():
            exception = isinstance(value, type) and issubclass(value, BaseException)
            if exception and value.__module__ == name:
                classes.append(value)
                if not issubclass(value, ChangefeedError):
                    strays.append(f"{name}.{value.__qualname__}")
    assert not strays, f"derive these from changefeed.ChangefeedError: {strays}"
    assert len(classes) >= 28, classes  # the walk sees the package's exceptions


def test_every_modules_doctests_pass() -> None:
    """The examples in the docstrings are the modules' documentation: they must hold."""
    import doctest

    attempted, failures = 0, []
    for name in imported_modules():
        module = importlib.import_module(name)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
        attempted += result.attempted
        if result.failed:
            failures.append(f"{name}: {result.failed} of {result.attempted} failed")
    assert not failures, "\n".join(failures)
    assert attempted > 100  # the walk sees the examples


def test_each_database_code_belongs_to_one_class() -> None:
    from changefeed import errors

    declared = [c for c in errors._refusals() if vars(c).get("sqlstate")]
    assert len({vars(c)["sqlstate"] for c in declared}) == len(declared)
    numbers = [n for c in errors._refusals() for n in vars(c).get("sqlserver_errors", ())]
    assert len(set(numbers)) == len(numbers) and all(51000 <= n < 52000 for n in numbers)
    assert errors.by_sqlserver_error()[51072] is errors.WriteTransactionBroken


def test_the_package_never_imports_the_demo() -> None:
    problems = []
    for name, package, path in modules():
        for line, target in imported(package, ast.parse(path.read_text(), str(path))):
            demo = "demo" in target.split(".") or target.split(".")[0] == "shop_demo"
            if demo or (name.startswith("changefeed.cli") and "demo" in target):
                problems.append(f"{path.relative_to(REPO)}:{line}: {name} imports {target}")
    assert not problems, "\n".join(problems)
    assert not (ROOT / "changefeed" / "demo").exists(), "the demo lives in examples/shop"


@pytest.mark.parametrize("command", ["status", "barrier"])
def test_status_and_barrier_start_without_pyspark(command: str) -> None:
    result = run_without_pyspark(command, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: changefeed {command}" in result.stdout


def test_pyspark_is_really_blocked() -> None:
    """The check above would pass vacuously if the block did not block: land needs Spark."""
    result = run_without_pyspark("land", "--connection", "postgresql://x@h/db", "--feed",
                                 "a.b", "--table", "l.b")  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "changefeed land: error: landing needs Spark" in result.stderr
    assert "pip install 'changefeed[spark]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_adapter_macro_folders_match_and_stay_small() -> None:
    postgres = sorted(p.name for p in (REPO / "macros" / "postgres").glob("*.sql"))
    sqlserver = sorted(p.name for p in (REPO / "macros" / "sqlserver").glob("*.sql"))
    assert postgres == sqlserver, "the same concern has the same file name on every adapter"
    assert len(postgres) <= 15, f"{len(postgres)} files per adapter: at most 15 ({postgres})"
    contributing = (REPO / "docs" / "contributing.md").read_text()
    assert [n for n in postgres if f"| `{n}` |" not in contributing] == [], "map them all"


def test_every_spark_macro_file_is_on_the_contributors_map() -> None:
    files = sorted(p.name for p in (REPO / "macros" / "spark").glob("*.sql"))
    contributing = (REPO / "docs" / "contributing.md").read_text()
    start = contributing.index("### `macros/spark/`")
    section = contributing[start : contributing.index("\n## ", start)]
    assert [n for n in files if f"`{n}`" not in section] == [], "map them all"


def test_the_local_environment_is_one_package() -> None:
    found = list(modules())
    top = {name for name, package, _path in found if package == "changefeed" and name != package}
    assert top - set(ALIASES) == {"changefeed.errors", "changefeed.service_state"}, (
        "a module of the local environment goes in changefeed.local, anything else in "
        "the package it belongs to"
    )
    local = {n for n, package, _path in found if package == "changefeed.local" and n != package}
    moved = {new for new in ALIASES.values() if new.startswith("changefeed.local.")}
    assert {*moved, "changefeed.local.jars", "changefeed.local._jvm"} <= local


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_a_former_path_is_only_an_alias(old: str) -> None:
    new = ALIASES[old]
    path = ROOT / f"{old.replace('.', '/')}.py"
    docstring, *statements, warn = ast.parse(path.read_text(), str(path)).body
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    assert [ast.unparse(s) for s in statements] == [
        "import warnings",
        f"from {new} import *",
        f"from {new} import __all__ as __all__",
    ]
    assert isinstance(warn, ast.Expr) and isinstance(warn.value, ast.Call)
    assert ast.unparse(warn.value.func) == "warnings.warn"
    assert ast.unparse(warn.value.args[1]) == "DeprecationWarning"


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_importing_a_former_path_warns_and_gives_the_same_objects(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = importlib.import_module(ALIASES[old])
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported again, it warns again
    message = rf"{re.escape(old)} is deprecated .*: import {re.escape(ALIASES[old])} instead"
    with pytest.warns(DeprecationWarning, match=message):
        alias = importlib.import_module(old)
    assert new.__file__ is not None
    assert public_names(Path(new.__file__)) <= set(new.__all__), "__all__ names them all"
    assert alias.__all__ == new.__all__
    assert [n for n in new.__all__ if getattr(alias, n) is not getattr(new, n)] == []
