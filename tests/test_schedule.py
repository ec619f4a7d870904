"""The workers' schedule (tests/support/schedule.py): groups, lanes read from the source,
and the order by recorded seconds."""

from __future__ import annotations

from pathlib import Path

from tests.support import schedule


def test_groups() -> None:
    assert schedule.worker_group("tests/test_cli.py::test_x[a-b]") == "tests/test_cli.py"
    assert schedule.worker_group("tests/pg_faults/test_load.py::t") == "tests/pg_faults"
    assert schedule.worker_group("tests/test_spark_publish.py::t") == "spark-kill-scenario"
    kills = "tests/test_lakehouse_kills.py::test_a[iceberg-first]"
    assert schedule.worker_group(kills) == "tests/test_lakehouse_kills.py[iceberg]"


def test_the_spark_lane_is_read_from_the_source(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test_marked.py").write_text("pytestmark = [pytest.mark.spark, pytest.mark.slow]\n")
    (tests / "test_fixture.py").write_text(
        "def test_a(\n    tmp_path: Path,\n    spark: A,\n):\n    pass\n"
    )
    (tests / "sub" / "test_kill.py").write_text("def test_b(kill_scenario_run):\n    pass\n")
    # only code counts: a name, a string or a variable called spark starts nothing
    (tests / "test_plain.py").write_text(
        "def test_c(sparkle, dbt):\n    spark = 'pytest.mark.spark'\n    marks.spark\n"
    )
    found = schedule.spark_modules(tmp_path)
    assert found == {"tests/test_marked.py", "tests/test_fixture.py", "tests/sub/test_kill.py"}
    assert schedule.is_spark_group("tests/test_marked.py[delta]", found)
    assert schedule.is_spark_group(schedule.KILL_SCENARIO_GROUP, found)
    assert not schedule.is_spark_group("tests/test_plain.py", found)


def test_this_repository_s_lanes() -> None:
    found = schedule.spark_modules()
    assert "tests/test_spark_scd.py" in found and "tests/test_lakehouse_kills.py" in found
    assert "tests/test_ulid_kernels.py" not in found and "tests/test_schedule.py" not in found


def test_longest_first_with_unrecorded_groups_first(tmp_path: Path) -> None:
    record = tmp_path / "durations.json"
    schedule.write_durations({"a": 10.04, "b": 300.0, "c": 42.0}, record)
    seconds = schedule.recorded(record)
    assert list(seconds) == ["b", "c", "a"] and seconds["a"] == 10.0
    assert schedule.longest_first(["a", "new", "b", "c", "newer"], seconds) == [
        "new", "newer", "b", "c", "a"
    ]  # fmt: skip
    record.write_text("not json")
    assert schedule.recorded(record) == {}
    assert schedule.recorded(tmp_path / "missing.json") == {}


def test_both_workers_take_the_longest_group_left_of_their_lane_then_of_the_other() -> None:
    spark = frozenset({"tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py"})
    seconds = {"tests/a.py": 100.0, "tests/b.py": 60.0, "tests/c.py": 50.0,
               "tests/d.py": 10.0, "tests/x.py": 20.0}  # fmt: skip
    queue = list(seconds)
    assert schedule.next_group(queue, seconds, spark, first=True) == "tests/a.py"
    assert schedule.next_group(queue, seconds, spark, first=False) == "tests/x.py"
    # the other lane done: each worker takes the longest left, not the shortest
    assert schedule.next_group(queue[1:4], seconds, spark, first=False) == "tests/b.py"
    assert schedule.next_group(["tests/x.py"], seconds, spark, first=True) == "tests/x.py"
    assert schedule.next_group([], seconds, spark, first=True) is None

    # two workers, each taking its next group when it is free: the short groups come
    # last and even out the finish (the shortest Spark group first would end 100 / 140)
    ends = [0.0, 0.0]
    while queue:
        worker = ends.index(min(ends))
        group = schedule.next_group(queue, seconds, spark, first=worker == 0)
        assert group is not None
        queue.remove(group)
        ends[worker] += seconds[group]
    assert ends == [110.0, 130.0]
