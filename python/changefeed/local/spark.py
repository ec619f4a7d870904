"""The embedded default Spark: a local session sized for a 2-core machine."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from changefeed.local import jars
from changefeed.local._jvm import LOCAL_CONF, JavaNotFound, jvm_output_to, require_java
from changefeed.local.catalog import Catalog, ensure_running
from changefeed.local.jars import LakehouseJarsMissing

__all__ = [
    "LOCAL_CONF",
    "JavaNotFound",
    "LakehouseJarsMissing",
    "jvm_output_to",
    "local_spark_session",
    "require_java",
]


def local_spark_session(
    app_name: str = "changefeed",
    *,
    warehouse_dir: str | Path | None = None,
    hive: bool = False,
    lakehouse: bool | None = None,
    catalog: Catalog | None = None,
) -> Any:
    """Start (or reuse) a ``local[2]`` Spark session.

    ``warehouse_dir``: where managed tables (and, with ``hive=True``, the Derby metastore)
    live; without it, a temporary directory that is removed when the Python process exits.

    ``lakehouse``: Delta Lake and Iceberg tables next to parquet (see
    :mod:`changefeed.local.jars`); ``None`` enables them when their jars are found, ``True``
    requires them (``LakehouseJarsMissing`` names ``make jars``), ``False`` leaves them out.

    ``catalog``: the shared catalog (:mod:`changefeed.local.catalog`) instead of ``warehouse_dir``
    and a Derby metastore; its server is started if it is stopped.

    Raises :class:`JavaNotFound` naming the fix when Java is missing, instead of the JVM
    gateway's generic error.
    """
    require_java()
    from pyspark.sql import SparkSession

    # Python workers default to `python3` on PATH, which lacks pyarrow/pandas when the
    # driver runs from a venv that is not activated (`.venv/bin/python -m pytest`).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warehouse: str | Path
    if catalog is not None:
        warehouse = catalog.warehouse
    elif warehouse_dir:
        warehouse = Path(warehouse_dir)
    else:
        warehouse = Path(tempfile.mkdtemp(prefix="cf-wh-"))
        # Registered before the session starts, so it runs after pyspark's own exit
        # handlers (atexit is last in, first out) have stopped the JVM's writers.
        atexit.register(shutil.rmtree, warehouse, ignore_errors=True)
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**LOCAL_CONF, "spark.sql.warehouse.dir": str(warehouse)}.items():
        builder = builder.config(key, value)
    if lakehouse is not False:
        try:
            found = jars.lakehouse_jars()
        except LakehouseJarsMissing:
            if lakehouse:
                raise
        else:
            for key, value in jars.lakehouse_conf(found, warehouse).items():
                builder = builder.config(key, value)
    if catalog is not None:
        ensure_running(catalog)
        # Spark reads spark-defaults.conf's user section last, so it wins there; set here
        # after the catalog's own, it wins for this session too (a builder's setting
        # overrides the file's).
        for key, value in {**catalog.spark_conf(), **catalog.user_conf()}.items():
            builder = builder.config(key, value)
        builder = builder.enableHiveSupport()
    elif hive:
        builder = builder.config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={Path(warehouse) / 'metastore_db'};create=true",
        ).enableHiveSupport()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
