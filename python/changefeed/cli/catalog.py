"""``changefeed catalog``: the shared catalog of a project's Spark processes.

    changefeed catalog init [--dir .changefeed/catalog] [--warehouse DIR | s3a://BUCKET/PATH]
    export SPARK_CONF_DIR=$PWD/.changefeed/catalog/conf
    changefeed catalog stop [--dir .changefeed/catalog]

``init`` starts an embedded PostgreSQL that holds Spark's Hive metastore, creates the
metastore's tables, and writes ``<dir>/conf/spark-defaults.conf``. Every Spark process
started with ``SPARK_CONF_DIR`` naming that directory (``changefeed land``, ``changefeed
status --consumer``, ``dbt run`` with dbt-spark's ``method: session``, your own pyspark)
then sees the same tables, at the same time. ``init`` again is harmless: it starts the
server if it is stopped (after a reboot, or by ``stop``) and rewrites the file, keeping
the settings below its last comment (an object store's endpoint and credentials:
docs/deploying.md). ``stop`` keeps the server stopped: no Spark start and no command
starts it again until ``init`` (docs/spark-source.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from changefeed.cli import CliError
from changefeed.local.catalog import DEFAULT_DIR


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "catalog",
        help="set up the shared Spark catalog (CLI, Spark and dbt at once)",
        description="The shared Spark catalog: a Hive metastore in an embedded PostgreSQL.",
    )
    parser.add_argument("action", choices=["init", "stop"],
                        help="init: create or start the catalog and write its "
                        "spark-defaults.conf; stop: stop its server")  # fmt: skip
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"the catalog's directory (default {DEFAULT_DIR})")  # fmt: skip
    parser.add_argument("--warehouse",
                        help="init: the tables' directory (default <dir>/warehouse), or an "
                        "object store's URI, s3a://BUCKET/PATH")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from changefeed.local import catalog

    directory = Path(args.dir).resolve()
    try:
        if args.action == "stop":
            catalog.stop(catalog.load(directory))
            print(f"changefeed catalog: stopped the server of {directory}", flush=True)
            return 0
        try:
            import pyspark  # noqa: F401
        except ImportError:
            raise CliError("the catalog needs Spark: pip install 'changefeed[spark]'") from None
        shared = catalog.init(directory, warehouse=args.warehouse)
    except catalog.CatalogError as exc:
        raise CliError(str(exc)) from None
    print(
        f"changefeed catalog: ready (tables in {shared.warehouse}). Every Spark process that "
        f"should share it needs:\n  export SPARK_CONF_DIR={shared.conf_dir}",
        flush=True,
    )
    return 0


def shared_catalog(warehouse: str | None) -> Any:
    """The shared catalog of SPARK_CONF_DIR, or None (Derby under --warehouse)."""
    from changefeed.local import catalog

    try:
        shared = catalog.configured()
    except catalog.CatalogError as exc:
        raise CliError(str(exc)) from None
    if shared is None and warehouse is not None and catalog.is_uri(warehouse):
        raise CliError(
            f"--warehouse {warehouse} is not a local directory, and without a shared catalog "
            "the warehouse directory also holds the Derby metastore: set up the shared "
            f"catalog on it (changefeed catalog init --warehouse {warehouse}) and export "
            "its SPARK_CONF_DIR instead of passing --warehouse"
        )
    if shared is not None and warehouse is not None:
        raise CliError(
            f"--warehouse {warehouse} and the shared catalog of SPARK_CONF_DIR (tables in "
            f"{shared.warehouse}) both name where tables live: leave out --warehouse, or "
            "unset SPARK_CONF_DIR for a Derby metastore under --warehouse"
        )
    return shared
