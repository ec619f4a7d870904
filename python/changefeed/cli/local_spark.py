"""The Spark start of the commands that need Spark (``land``, ``status --consumer``,
``retention --spark-table``): their shared options, and a local session on an existing
warehouse that says on stderr why the command is silent while it starts."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from changefeed.cli import CliError, first_line
from changefeed.local.catalog import ANNOUNCED


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """``--spark``, ``--warehouse`` and ``--conf``."""
    parser.add_argument("--spark", choices=["local", "existing"], default="local",
                        help="local: embedded local[2] Spark on the shared catalog of "
                        "SPARK_CONF_DIR, else a Derby metastore (default); existing: "
                        "SparkSession.builder.getOrCreate()")  # fmt: skip
    parser.add_argument("--warehouse",
                        help="--spark local without a shared catalog: the warehouse and "
                        "Derby metastore directory (default spark-warehouse)")  # fmt: skip
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration (repeatable)")  # fmt: skip


#: Settings Spark reads only when it starts (where it runs, its driver and executors, its
#: jars): a local session has started before ``--conf`` is applied, so they are refused
#: there rather than ignored (``--conf spark.master=spark://...`` landed on local[2]).
STARTUP_SETTINGS = (
    "spark.master", "spark.remote", "spark.submit.", "spark.driver.", "spark.executor.",
    "spark.jars", "spark.files", "spark.archives", "spark.cores.", "spark.dynamicAllocation.",
    "spark.kubernetes.", "spark.yarn.", "spark.deploy.", "spark.sql.extensions",
    "spark.sql.catalogImplementation", "spark.sql.warehouse.dir",
)  # fmt: skip


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    """The ``--conf`` settings; with ``--spark local`` a setting Spark reads only at its
    start is refused (:data:`STARTUP_SETTINGS`), before anything starts."""
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--conf needs KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    if args.spark == "local":
        for key in conf:
            if key.startswith(STARTUP_SETTINGS):
                raise CliError(
                    f"--conf {key} is read by Spark when it starts, and --spark local starts "
                    "its own local[2] Spark in this process before --conf applies; use "
                    f"--spark existing, which starts Spark with it (--spark existing --conf "
                    f"{key}=...), or put it in the spark-defaults.conf of SPARK_CONF_DIR"
                )
    return conf


def set_runtime_conf(session: Any, conf: dict[str, str]) -> None:
    """Apply ``conf`` to a started session; a setting Spark refuses is one error line."""
    for key, value in conf.items():
        try:
            session.conf.set(key, value)
        except Exception as exc:  # PySpark's own: a static SQL setting, a bad value
            raise CliError(f"--conf {key}: {first_line(exc)}") from None


def start_local_spark(warehouse: str | None, command: str, option: str) -> Any:
    """A local Spark on the shared catalog of ``SPARK_CONF_DIR``, else on the tables of
    ``warehouse`` (default ``spark-warehouse``; its Derby metastore must exist), for
    ``changefeed <command> <option>``; every failure is a CliError naming the fix."""
    from changefeed.cli.catalog import shared_catalog
    from changefeed.local.spark import (
        JavaNotFound,
        jvm_output_to,
        local_spark_session,
        require_java,
    )

    try:
        require_java()
    except JavaNotFound as exc:
        raise CliError(f"{exc}; or leave out {option}") from None
    shared = shared_catalog(warehouse)
    where = Path(warehouse or "spark-warehouse").resolve()
    if shared is None and not (where / "metastore_db").exists():
        raise CliError(
            f"there is no Spark metastore in {where} (no metastore_db): pass the "
            "warehouse directory the tables were written with (--warehouse), or export the "
            "SPARK_CONF_DIR of the shared catalog (changefeed catalog init)"
        )
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise CliError("pyspark is not installed: pip install 'changefeed[spark]'") from None
    # Spark's own log lines go to a file, not between the command's output.
    log = Path(tempfile.gettempdir()) / f"changefeed-{command}-spark.log"
    # The start takes 20-40 s with nothing else to show: say why the command is silent.
    print(
        f"changefeed {command}: starting a local Spark for {option} (20-40 s; its log: {log})",
        file=sys.stderr,
        flush=True,
    )
    os.environ[ANNOUNCED] = "1"  # the catalog's spark-env.sh then says nothing
    try:
        with jvm_output_to(log):
            spark = local_spark_session(
                app_name=f"changefeed-{command}", warehouse_dir=where, hive=True, catalog=shared
            )
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "XSDB6" in str(exc) or "another instance of Derby" in str(exc):
            text = (
                f"the metastore in {where} is in use by another Spark process (a running "
                "demo or landing); run this again when it has finished"
            )
        raise CliError(f"Spark did not start: {text}") from None
    spark.sparkContext.setLogLevel("FATAL")
    return spark
