"""The embedded default Spark: a local session sized for a 2-core machine."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from changefeed import _jars


def local_spark_session(
    app_name: str = "changefeed",
    *,
    warehouse_dir: str | Path | None = None,
    hive: bool = False,
    lakehouse: bool | None = None,
) -> Any:
    """Start (or reuse) a ``local[2]`` Spark session.

    ``lakehouse``: Delta Lake and Iceberg tables next to parquet (see
    :mod:`changefeed._jars`); ``None`` enables them when their jars are found, ``True``
    requires them (``LakehouseJarsMissing`` names ``make jars``), ``False`` leaves them out.

    Raises ``RuntimeError`` naming the fix when Java is missing, instead of the JVM
    gateway's generic error.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError(
            "Java was not found; Spark needs Java 17 or newer. Install a JDK 17+ "
            "(Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME."
        )
    from pyspark.sql import SparkSession

    # Python workers default to `python3` on PATH, which lacks pyarrow/pandas when the
    # driver runs from a venv that is not activated (`.venv/bin/python -m pytest`).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warehouse = Path(warehouse_dir) if warehouse_dir else Path(tempfile.mkdtemp(prefix="cf-wh-"))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if lakehouse is not False:
        try:
            jars = _jars.lakehouse_jars()
        except _jars.LakehouseJarsMissing:
            if lakehouse:
                raise
        else:
            for key, value in _jars.lakehouse_conf(jars, warehouse).items():
                builder = builder.config(key, value)
    if hive:
        builder = builder.config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={warehouse / 'metastore_db'};create=true",
        ).enableHiveSupport()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
