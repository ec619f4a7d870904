"""Shared fixtures: the real embedded PostgreSQL server and a real local Spark session.

When ``CI=true`` a test that needs PostgreSQL or Spark fails if they are missing; on a
developer machine it is skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import spark_jvm
from tests.support.real_parts import unavailable

# The Spark JVMs of the processes the tests start get C1 only, the serial collector and
# the class-data archive `make test` builds; the worker's own session keeps C2 (see
# tests/support/spark_jvm.py). A SPARK_SUBMIT_OPTS of the developer's own is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_jvm.child_options())

# Under pytest-xdist (`make test` runs `-n 2`; pyproject's addopts choose `--dist
# loadgroup --no-loadscope-reorder`) each worker is a test session of its own, with its own
# PostgreSQL server, Spark session and dbt harness, and takes whole groups of tests. A
# group is a module, so that module-scoped fixtures are set up once; the fault suite,
# which shares the session harness of its conftest, is one group; and the modules whose
# tests read the Spark kill scenario (a session fixture of two minutes) are one group, so
# that the scenario runs once.
#
# Two lanes. The first worker takes the groups that start Spark, longest first; the
# other takes the PostgreSQL, rendering and client groups, then Spark groups from the back
# of the Spark lane (shortest first), so that the two meet in the middle; a worker with
# nothing left in its own lane joins the other. Within a lane, groups go out in collection
# order, longest first. The Delta and the Iceberg kill scenario of
# tests/test_lakehouse_kills.py (four minutes each) are a group each, so that two workers
# can run them at once.
#
# The groups are computed from node ids by the scheduler below rather than with
# `xdist_group` marks: pytest-xdist 3.8 applies those marks by rewriting `item._nodeid`,
# which pytest 9 no longer reads, so marked tests would be spread test by test. The
# scheduler sees node ids only, so the Spark lane is a list of groups, checked against
# the tests' markers and fixtures at collection (`pytest_collection_modifyitems`).
KILL_SCENARIO_GROUP = "spark-kill-scenario"
KILL_SCENARIO_MODULES = (
    "tests/test_health_models.py",
    "tests/test_spark_consumer.py",
    "tests/test_spark_publish.py",
)
#: Modules whose module-scoped fixture runs a whole scenario per parameter (a table format):
#: a group per parameter (the node id's first parameter), e.g.
#: ``tests/test_lakehouse_kills.py[delta]``.
PER_PARAMETER_MODULES = ("tests/test_lakehouse_kills.py",)
#: Every group with a test that starts Spark, in this process or in a child, longest first
#: (as measured in a full `make test`).
SPARK_LANE = (
    "tests/test_lakehouse_kills.py[delta]",
    "tests/test_lakehouse_kills.py[iceberg]",
    "tests/test_spark_scd.py",
    KILL_SCENARIO_GROUP,
    "tests/test_spark_scd_kill.py",
    "tests/test_getting_started.py",
    "tests/test_spark_reprocess.py",
    "tests/test_snapshot_files.py",
    "tests/test_docs_samples.py",
    "tests/test_shared_catalog.py",
    "tests/test_spark_retention.py",
    "tests/test_landing.py",
    "tests/test_demo.py",
    "tests/test_snapshot.py",
    "tests/test_spark_stream.py",
    "tests/test_spark_lakehouse.py",
    "tests/test_spark_consumer_window.py",
    "tests/test_landing_continuous.py",
    "tests/test_spark_row_images.py",
    "tests/test_spark_key_order.py",
    "tests/test_udfs_older_pyspark.py",
    "tests/test_spark_udfs.py",
    "tests/test_local_spark.py",
    "tests/test_spark_source.py",
    "tests/test_ulid_sql_macros.py",
    "tests/test_spark_freshness.py",
    "tests/sqlserver_live/test_spark_source_live.py",
    "tests/sqlserver_live/test_live_snapshot_landing.py",
)
#: The longest of the other groups, first in their lane.
LONGEST_FIRST = (
    *SPARK_LANE,
    "tests/test_pg_outbox_capture.py",
    "tests/test_pg_feed_setup.py",
    "tests/pg_faults",
    "tests/test_sqlserver_render.py",
)


def worker_group(nodeid: str) -> str:
    """The group of a test (``tests/x.py::test_y[...]``) under pytest-xdist."""
    path = nodeid.split("::", 1)[0]
    if path in KILL_SCENARIO_MODULES:
        return KILL_SCENARIO_GROUP
    if path.startswith("tests/pg_faults/"):
        return "tests/pg_faults"
    if path in PER_PARAMETER_MODULES and nodeid.endswith("]"):
        parameters = nodeid[nodeid.rindex("[") + 1 : -1]  # "delta-first"
        return f"{path}[{parameters.split('-', 1)[0]}]"
    return path


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

    class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

        def _next_scope(self, node: Any) -> str | None:
            spark_node = node is self.nodes[0]
            scopes = list(self.workqueue)
            spark = [s for s in scopes if s in SPARK_LANE]
            other = [s for s in scopes if s not in SPARK_LANE]
            if spark_node:
                return (spark or other or [None])[0]
            return (other or spark[-1:] or [None])[0]

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


#: The Spark kill scenario (four Spark driver processes, each with dbt runs) takes about two
#: minutes alone, and several times that while the other worker runs Spark too; its
#: session fixture's set-up is charged to the first test that asks for it.
KILL_SCENARIO_TIMEOUT_S = 1800


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "kill_scenario_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(KILL_SCENARIO_TIMEOUT_S))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    strays = [
        item.nodeid
        for item in items
        if "kill_scenario_run" in getattr(item, "fixturenames", ())
        and worker_group(item.nodeid) != KILL_SCENARIO_GROUP
    ]
    if strays:
        raise pytest.UsageError(
            f"{strays[0]} reads the Spark kill scenario but its module is not in "
            "KILL_SCENARIO_MODULES of tests/conftest.py: add it there, or each worker "
            "runs the scenario again"
        )
    off_lane = [
        item.nodeid
        for item in items
        if starts_spark(item) and worker_group(item.nodeid) not in SPARK_LANE
    ]
    if off_lane:
        raise pytest.UsageError(
            f"{off_lane[0]} starts Spark but its group {worker_group(off_lane[0])!r} is not "
            "in SPARK_LANE of tests/conftest.py: add it there, or two workers run Spark at "
            "once"
        )

    def rank(item: pytest.Item) -> int:
        group = worker_group(item.nodeid)
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a group stays as collected


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One embedded PostgreSQL 16 server for the whole test session."""
    from changefeed.embedded_postgres import EmbeddedPostgresUnavailable, start

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
        from changefeed.local_spark import local_spark_session
    except ImportError as exc:
        unavailable("Spark", str(exc))
    chosen = os.environ["SPARK_SUBMIT_OPTS"]
    if chosen == spark_jvm.child_options():  # not the developer's own
        os.environ["SPARK_SUBMIT_OPTS"] = spark_jvm.SESSION_OPTIONS
    try:
        session = local_spark_session(app_name="changefeed-tests")
    except Exception as exc:
        unavailable("Spark", f"{type(exc).__name__}: {exc}")
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = chosen
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
