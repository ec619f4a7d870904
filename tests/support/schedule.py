"""How `make test` spreads the tests over its two pytest-xdist workers (docs/testing.md,
"Workers"), with no list of modules kept by hand.

* **Groups.** A worker takes whole groups (:func:`worker_group`): a group is a module, so
  that module-scoped fixtures are set up once; the fault suite, which shares the session
  harness of its conftest, is one group; the modules that read the Spark kill scenario (a
  session fixture of minutes) are one group, so that it runs once; and a module of
  :data:`PER_PARAMETER_MODULES` is a group per parameter, so that two workers can run
  its scenarios (one per table format) at once.
* **Lanes.** The first worker takes the groups that start Spark, the other the rest and
  then the longest Spark group left, like the first (:func:`next_group`): the Spark groups
  are nine tenths of the suite, so the second worker runs Spark most of the time either
  way, and taking the longest left keeps the short groups for the end, where they even
  out the two workers' finish. Which modules start Spark is read
  from their source (:func:`spark_modules`); the collection checks it against the tests'
  markers and fixtures, so a module the reading misses fails at once instead of being
  scheduled badly.
* **Order.** Within a lane the longest group goes first, by the seconds recorded in
  :data:`DURATIONS` (``make test-durations`` writes them from a full run). A group with
  no record yet (a new module) counts as the longest of its lane: it starts first and
  cannot be the one the other worker waits for at the end.

**Tiers.** ``make test-fast`` runs the tests not marked ``slow``; a group whose recorded
seconds exceed :data:`FAST_GROUP_SECONDS` counts as slow as a whole, so that the fast tier
never pays for a module's scenario.

The scheduler of the controller sees node ids only (not markers or fixtures), which is
why the lanes come from the source and the checks from the collection.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
#: Seconds per group of the last ``make test-durations`` (setup, call and teardown of its
#: tests, summed over the run).
DURATIONS = TESTS / "durations.json"

#: A group whose recorded seconds exceed this counts as slow: `make test-fast` leaves it out.
#: In the gap of tests/durations.json between 40 s and 52 s, so that a group's usual
#: run-to-run change does not move it between the tiers; `make test-fast` then runs in
#: under five minutes on this project's 2-core machine (docs/testing.md).
FAST_GROUP_SECONDS = 45.0

KILL_SCENARIO_GROUP = "spark-kill-scenario"
#: The modules whose tests read the session's Spark kill scenario (``kill_scenario_run``).
KILL_SCENARIO_MODULES = (
    "tests/test_health_models.py",
    "tests/test_spark_consumer.py",
    "tests/test_spark_publish.py",
)
#: Modules whose module-scoped fixture runs a whole scenario per parameter (a table format):
#: a group per parameter (the node id's first parameter), e.g.
#: ``tests/test_lakehouse_kills.py[delta]``.
PER_PARAMETER_MODULES = ("tests/test_lakehouse_kills.py",)
FAULT_SUITE = "tests/pg_faults"

#: The fixtures that start Spark: a module with a function taking one of them starts Spark.
SPARK_FIXTURES = frozenset({"spark", "kill_scenario_run"})


def _starts_spark(source: str) -> bool:
    """Whether a module's code (not its strings) marks it ``spark`` or takes a Spark
    fixture."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if any(a.arg in SPARK_FIXTURES for a in arguments):
                return True
        elif isinstance(node, ast.Attribute) and node.attr == "spark":
            inner = node.value
            if isinstance(inner, ast.Attribute) and inner.attr == "mark":
                return True
    return False


def worker_group(nodeid: str) -> str:
    """The group of a test (``tests/x.py::test_y[...]``)."""
    path = nodeid.split("::", 1)[0]
    if path in KILL_SCENARIO_MODULES:
        return KILL_SCENARIO_GROUP
    if path.startswith(FAULT_SUITE + "/"):
        return FAULT_SUITE
    if path in PER_PARAMETER_MODULES and nodeid.endswith("]"):
        parameters = nodeid[nodeid.rindex("[") + 1 : -1]  # "delta-first"
        return f"{path}[{parameters.split('-', 1)[0]}]"
    return path


def spark_modules(root: Path = REPO) -> frozenset[str]:
    """The test modules (``tests/...py``, relative to ``root``) whose source starts Spark."""
    return frozenset(
        path.relative_to(root).as_posix()
        for path in (root / "tests").rglob("test_*.py")
        if _starts_spark(path.read_text(encoding="utf-8"))
    )


def is_spark_group(group: str, spark: frozenset[str]) -> bool:
    """Whether ``group`` (a :func:`worker_group`) starts Spark, given :func:`spark_modules`."""
    if group == KILL_SCENARIO_GROUP:
        return True
    return group.split("[", 1)[0] in spark


def recorded(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per group; none when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def longest_first(groups: Iterable[str], seconds: Mapping[str, float]) -> list[str]:
    """``groups`` longest first; a group with no record first of all (ties keep their order)."""
    return sorted(groups, key=lambda g: -seconds.get(g, float("inf")))


def next_group(
    queue: Iterable[str], seconds: Mapping[str, float], spark: frozenset[str], *, first: bool
) -> str | None:
    """The group a worker takes next from ``queue`` (:func:`worker_group` names), given
    :func:`spark_modules`: the first worker the longest group that starts Spark, else the
    longest other; the second worker the longest other, else the longest Spark group.
    None when ``queue`` is empty."""
    ordered = longest_first(queue, seconds)
    starts = [g for g in ordered if is_spark_group(g, spark)]
    rest = [g for g in ordered if not is_spark_group(g, spark)]
    lanes = (starts, rest) if first else (rest, starts)
    return next((lane[0] for lane in lanes if lane), None)


def write_durations(per_group: Mapping[str, float], path: Path = DURATIONS) -> None:
    """Write ``per_group`` (seconds, rounded) as the record that orders the lanes."""
    ordered = {g: round(s, 1) for g, s in sorted(per_group.items(), key=lambda i: -i[1])}
    path.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
