"""The embedded default Spark: a local session sized for a 2-core machine."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changefeed import _jars

if TYPE_CHECKING:
    from changefeed.catalog import Catalog


#: The settings of the embedded default Spark, sized for a 2-core machine; the shared
#: catalog's spark-defaults.conf holds them too, so dbt's session runs like the CLI's.
LOCAL_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


class JavaNotFound(RuntimeError):
    """Spark needs Java and none was found; the message names the fix."""


def require_java() -> None:
    """Raise :class:`JavaNotFound` unless ``java`` is on PATH or JAVA_HOME is set.

    The one Java check of the Python code (the CLI and the demo call it before starting
    Spark); ``scripts/check_java.sh`` is the same check for ``make``, with the version.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise JavaNotFound(
            "Java was not found, and Spark needs Java 17 or newer. Install a JDK 17+ "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install "
            "openjdk@17) or set JAVA_HOME"
        )


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
    :mod:`changefeed._jars`); ``None`` enables them when their jars are found, ``True``
    requires them (``LakehouseJarsMissing`` names ``make jars``), ``False`` leaves them out.

    ``catalog``: the shared catalog (:mod:`changefeed.catalog`) instead of ``warehouse_dir``
    and a Derby metastore; its server is started if it is stopped.

    Raises :class:`JavaNotFound` naming the fix when Java is missing, instead of the JVM
    gateway's generic error.
    """
    require_java()
    from pyspark.sql import SparkSession

    # Python workers default to `python3` on PATH, which lacks pyarrow/pandas when the
    # driver runs from a venv that is not activated (`.venv/bin/python -m pytest`).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
            jars = _jars.lakehouse_jars()
        except _jars.LakehouseJarsMissing:
            if lakehouse:
                raise
        else:
            for key, value in _jars.lakehouse_conf(jars, warehouse).items():
                builder = builder.config(key, value)
    if catalog is not None:
        from changefeed.catalog import ensure_running

        ensure_running(catalog)
        for key, value in catalog.spark_conf().items():
            builder = builder.config(key, value)
        builder = builder.enableHiveSupport()
    elif hive:
        builder = builder.config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={warehouse / 'metastore_db'};create=true",
        ).enableHiveSupport()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def jvm_output_to(log_file: Path) -> Iterator[None]:
    """Start processes with stdout/stderr going to ``log_file`` (Python's own are kept).

    The Spark JVM inherits the descriptors when it is launched, so its log lines (and
    its Python workers') go to the log for the whole session, while the caller's own
    output stays readable.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(log_file, "ab") as log:
        try:
            for fd in (1, 2):
                os.dup2(log.fileno(), fd)
            yield
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
