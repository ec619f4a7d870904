"""The ULID UDFs on PySpark 3.5 (pandas UDFs) give exactly what they give on the pinned
PySpark (Arrow UDFs): same names, same values, same NULLs, same strict error.

PySpark 3.5 runs in an environment of its own (``make compat-venv`` builds
``.venv-pyspark35`` from tests/support/older_pyspark.txt; CHANGEFEED_COMPAT_PYTHON names
another interpreter); this module runs tests/support/udf_compat.py there and compares its
JSON with the same function's results in this session's Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support import udf_compat
from tests.support.real_parts import unavailable

# A second PySpark environment and its JVM: about 18 s, so make test-fast leaves it out.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def older() -> dict[str, Any]:
    python = Path(os.environ.get("CHANGEFEED_COMPAT_PYTHON", REPO / ".venv-pyspark35/bin/python"))
    if not python.exists():
        unavailable("PySpark 3.5", f"{python} does not exist: run make compat-venv")
    env = {**os.environ, "PYSPARK_PYTHON": str(python)}
    env.pop("PYTHONPATH", None)  # the older environment must not see this one's packages
    done = subprocess.run(
        [str(python), str(REPO / "tests/support/udf_compat.py")],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def pinned(spark: Any) -> dict[str, Any]:
    out = udf_compat.results(spark)
    from changefeed.spark import udfs

    udfs.register(spark)  # leave the session's functions non-strict for later modules
    return out


def test_the_older_environment_is_pyspark_35(older: dict[str, Any]) -> None:
    assert older["pyspark"].startswith("3.5.")


def test_every_function_gives_the_same_values(
    older: dict[str, Any], pinned: dict[str, Any]
) -> None:
    for label in ("sql", "uuid", "columns", "nulls"):
        assert older["results"][label] == pinned[label], label


def test_the_values_are_the_known_ones(older: dict[str, Any]) -> None:
    known = older["results"]["sql"][0]
    assert known[1] == known[2] == udf_compat.KNOWN_TEXT
    assert known[3] == udf_compat.KNOWN_HEX
    assert known[4] == known[5] == "2016-07-30 23:54:10.259"
    assert known[6] == known[7] == udf_compat.KNOWN_MS
    assert known[8] is True and known[9] is True
    assert known[10] == "01563e3a-b5d3-d676-4c61-efb99302bd5b"
    assert known[11] == udf_compat.KNOWN_HEX[:16] + (42).to_bytes(8, "big").hex()
    invalid = older["results"]["sql"][4]  # 2 bytes / a 'U' at the end
    assert invalid[1:4] == [None, None, None] and invalid[8:10] == [False, False]
    assert older["results"]["nulls"] == [[None, None, None]]
    assert older["results"]["uuid"][1][1] == udf_compat.KNOWN_HEX
    assert older["results"]["uuid"][2][1:] == [None, None]


def test_strict_errors_name_the_value_on_both(
    older: dict[str, Any], pinned: dict[str, Any]
) -> None:
    expected = "ulid_from_string(strict=True): '01ARZ3NDEKTSV4RRFFQ69G5FAU' is not a valid ULID"
    assert expected in (older["results"]["strict_error"] or "")
    assert expected in (pinned["strict_error"] or "")
