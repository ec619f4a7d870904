"""What every local JVM of changefeed shares: the embedded default Spark's settings, the
Java check, and where a JVM's own output goes. Below :mod:`changefeed.local.spark` and
:mod:`changefeed.local.catalog` (both start JVMs), so neither imports the other for these."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from changefeed.errors import ChangefeedError

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
    # A landing adds a source's new column to a parquet table's payload struct, which a
    # Hive metastore refuses as an incompatible type change unless this is false.
    "spark.hadoop.hive.metastore.disallow.incompatible.col.type.changes": "false",
}


class JavaNotFound(ChangefeedError, RuntimeError):
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
