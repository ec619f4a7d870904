"""``changefeed.local.spark.local_spark_session`` (docs/python-api.md, Local Spark and
embedded PostgreSQL): a session started without ``warehouse_dir`` keeps its tables in a
temporary directory that is gone once the process has exited, and one started with it
leaves the directory in place.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]

#: Starts a session, writes a managed table, prints the warehouse and the table's files.
CHILD = """
import json, sys
from pathlib import Path
from changefeed.local.spark import local_spark_session

kwargs = json.loads(sys.argv[1])
spark = local_spark_session("changefeed-test-local", lakehouse=False, **kwargs)
spark.range(3).write.saveAsTable("t")
warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
print(json.dumps({"warehouse": str(warehouse),
                  "files": sorted(p.name for p in (warehouse / "t").glob("part-*"))}))
"""


def _run_child(kwargs: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(kwargs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_temporary_warehouse_is_removed_when_the_process_exits() -> None:
    result = _run_child({})
    warehouse = Path(str(result["warehouse"]))
    assert warehouse.name.startswith("cf-wh-"), warehouse
    assert result["files"], "the child wrote no table files, so the check below proves nothing"
    assert not warehouse.exists(), f"{warehouse} was left behind"


def test_a_given_warehouse_is_kept(tmp_path: Path) -> None:
    result = _run_child({"warehouse_dir": str(tmp_path / "wh")})
    warehouse = Path(str(result["warehouse"]))
    assert warehouse == tmp_path / "wh"
    kept = sorted(p.name for p in (warehouse / "t").glob("part-*"))
    assert kept and kept == result["files"]
