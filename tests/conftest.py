"""Shared fixtures: the real embedded PostgreSQL server and a real local Spark session.

When ``CI=true`` a test that needs PostgreSQL or Spark fails if they are missing; on a
developer machine it is skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import schedule, spark_jvm
from tests.support.dbt_harness import keep_parsed_jinja
from tests.support.real_parts import unavailable

# Every Spark JVM of the tests, the worker's own session and the processes the tests start,
# gets C1 only, the serial collector and the class-data archive `make test` builds (see
# tests/support/spark_jvm.py). A SPARK_SUBMIT_OPTS of the developer's own is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_jvm.jvm_options())

# Every dbt project the tests parse in this process (the harness's, the docs' and the
# demo's scratch projects) shares the package's parsed macros (tests/support/dbt_harness.py).
keep_parsed_jinja()

# Under pytest-xdist (`make test` runs `-n 2`; pyproject's addopts choose `--dist
# loadgroup --no-loadscope-reorder`) each worker is a test session of its own, with its own
# PostgreSQL server, Spark session and dbt harness, and takes whole groups of tests, in
# two lanes, longest first: tests/support/schedule.py has the rules.
#
# The groups are computed from node ids by the scheduler below rather than with
# `xdist_group` marks: pytest-xdist 3.8 applies those marks by rewriting `item._nodeid`,
# which pytest 9 no longer reads, so marked tests would be spread test by test.


def starts_spark(item: pytest.Item) -> bool:
    """Whether a test runs Spark (marked ``spark``, or uses a Spark fixture)."""
    fixtures = getattr(item, "fixturenames", ())
    return (
        item.get_closest_marker("spark") is not None
        or "spark" in fixtures
        or "kill_scenario_run" in fixtures
    )


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    spark_modules = schedule.spark_modules()
    seconds = schedule.recorded()

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return schedule.worker_group(nodeid)

        def _next_scope(self, node: Any) -> str | None:
            return schedule.next_group(
                self.workqueue, seconds, spark_modules, first=node is self.nodes[0]
            )

        def _assign_work_unit(self, node: Any) -> None:
            # LoadScopeScheduling's, with the scope chosen by lane instead of the queue's
            # first; a worker with no work left in its lane is shut down.
            scope = self._next_scope(node)
            if scope is None:
                if not self._pending_of(self.assigned_work.get(node, {})):
                    node.shutdown()
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

    return LaneScheduling(config, log)


#: Seconds per group of this run, for ``make test-durations`` (CHANGEFEED_RECORD_DURATIONS).
_RUN_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("CHANGEFEED_RECORD_DURATIONS") and not os.environ.get("PYTEST_XDIST_WORKER"):
        group = schedule.worker_group(report.nodeid)
        _RUN_SECONDS[group] = _RUN_SECONDS.get(group, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # a run that failed tests still measured them; an interrupted one did not finish
    finished = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    if _RUN_SECONDS and finished and not os.environ.get("PYTEST_XDIST_WORKER"):
        schedule.write_durations(_RUN_SECONDS)


#: The Spark kill scenario (a resident and three killed Spark drivers, with dbt runs) takes
#: about two minutes alone, and several times that while the other worker runs Spark too;
#: its session fixture's set-up is charged to the first test that asks for it.
KILL_SCENARIO_TIMEOUT_S = 1800


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = schedule.recorded()
    for item in items:
        if "kill_scenario_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(KILL_SCENARIO_TIMEOUT_S))
        # `make test-fast` leaves out the tests marked slow: also those of a group whose
        # run took longer than the fast tier can afford (its module-scoped scenario runs
        # for any one of its tests).
        if seconds.get(schedule.worker_group(item.nodeid), 0.0) > schedule.FAST_GROUP_SECONDS:
            item.add_marker(pytest.mark.slow)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    strays = [
        item.nodeid
        for item in items
        if "kill_scenario_run" in getattr(item, "fixturenames", ())
        and schedule.worker_group(item.nodeid) != schedule.KILL_SCENARIO_GROUP
    ]
    if strays:
        raise pytest.UsageError(
            f"{strays[0]} reads the Spark kill scenario but its module is not in "
            "KILL_SCENARIO_MODULES of tests/support/schedule.py: add it there, or each "
            "worker runs the scenario again"
        )
    spark_modules = schedule.spark_modules()
    off_lane = [
        item.nodeid
        for item in items
        if starts_spark(item)
        and not schedule.is_spark_group(schedule.worker_group(item.nodeid), spark_modules)
    ]
    if off_lane:
        raise pytest.UsageError(
            f"{off_lane[0]} starts Spark, but its module's source does not say so: mark it "
            "(`pytestmark = pytest.mark.spark`), or the scheduler puts it in the lane of "
            "the tests without Spark and two workers run Spark at once"
        )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One embedded PostgreSQL 16 server for the whole test session."""
    from changefeed.local.embedded_postgres import EmbeddedPostgresUnavailable, start

    try:
        server = start()
    except EmbeddedPostgresUnavailable as exc:
        unavailable("PostgreSQL", str(exc))
    yield server


@pytest.fixture(scope="session")
def pg_uri(pg_server: Any) -> str:
    return str(pg_server.uri)


@pytest.fixture(scope="module")
def admin(pg_uri: str) -> Iterator[Any]:
    """An autocommit connection to the embedded server as its superuser, one per module."""
    from tests.support.pg_feeds import connect

    conn = connect(pg_uri)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local Spark session shared by all Spark tests (starting one costs ~5 s)."""
    try:
        from changefeed.local.spark import local_spark_session
    except ImportError as exc:
        unavailable("Spark", str(exc))
    try:
        session = local_spark_session(app_name="changefeed-tests")
    except Exception as exc:
        unavailable("Spark", f"{type(exc).__name__}: {exc}")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dbt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The in-process dbt harness of tests/support/dbt_harness.py (its docstring has the API).

    Its ``postgres``/``spark`` targets start the ``pg_uri``/``spark`` fixtures lazily, on
    first use, so a test pays only for the servers it renders or runs against.
    """
    from tests.support.dbt_harness import DbtHarness

    return DbtHarness(
        tmp_path_factory.mktemp("dbt"),
        postgres_uri=lambda: request.getfixturevalue("pg_uri"),
        spark=lambda: request.getfixturevalue("spark"),
    )


@pytest.fixture(scope="session")
def kill_scenario_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The Spark kill scenario (tests/support/spark_kill_scenario.py), run once per session."""
    from tests.support.spark_kill_scenario import kill_scenario

    return kill_scenario(tmp_path_factory.getbasetemp() / "sparkfeed-scenario")
