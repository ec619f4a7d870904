"""changefeed's dbt plugin: the shared catalog is checked before dbt starts Spark.

dbt imports every top-level module whose name starts with ``dbt_`` and creates each class
in its ``plugins`` list once it has loaded the project, before it registers the adapter
or parses a model (``dbt.plugins``: an interface dbt-core calls experimental, the same
in dbt-core 1.10 and 1.11; the suite runs 1.11). Installing changefeed installs this
module, so every dbt command of the environment runs :class:`SharedCatalogCheck`.

It acts only where dbt would start a Spark driver: a command that connects, on a target
of dbt-spark's ``method: session``, in a process that runs no driver yet. With
``SPARK_CONF_DIR`` naming a catalog that ``changefeed catalog init`` wrote
(:func:`changefeed.local.catalog.configured`), it does what the catalog's ``spark-env.sh``
would do at the driver's launch, but before Spark: a catalog stopped by ``changefeed
catalog stop`` fails the command in one line naming ``changefeed catalog init``, and a
server that is down after a reboot is started
(:func:`changefeed.local.catalog.before_spark`). Without ``SPARK_CONF_DIR`` (a new
terminal), a project that has this dbt package installed and a catalog in
``.changefeed/catalog`` of its directory or of a parent
(:func:`changefeed.local.catalog.found_above`) fails in one line naming the export,
before Spark would make a Derby ``metastore_db/`` of its own and miss the landed tables.
Past that point dbt reports a failure as Spark's, in a dozen lines of its own around
it. Any other command or target costs a few attribute reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dbt.plugins.manager import dbtPlugin

__all__ = ["SharedCatalogCheck", "plugins"]

#: Commands that never open a connection, so never start Spark.
_NO_CONNECTION = frozenset({"clean", "deps", "list", "ls", "parse", "serve"})


class SharedCatalogCheck(dbtPlugin):
    """Fails a dbt command at once, in one line naming the fix, when the Spark session it
    would start needs the shared catalog and would not get it: its server is stopped, or
    ``SPARK_CONF_DIR`` is not set where a project of the package has one nearby."""

    def initialize(self) -> None:
        project = _spark_session_project()
        if project is None:
            return
        from changefeed.local import catalog

        try:
            shared = catalog.configured()  # a catalog directory gone says so too
            if shared is not None:
                catalog.before_spark(shared, announce=_say)
            elif not os.environ.get("SPARK_CONF_DIR") and _uses_changefeed(project):
                # A new terminal without the settings: Spark would make a Derby
                # metastore_db/ here and not find the landed tables in it.
                nearby = catalog.found_above(Path(project.project_root).resolve())
                if nearby is not None:
                    raise catalog.CatalogError(catalog.unset_message(nearby))
        except catalog.CatalogError as exc:
            # dbt prints its own "Runtime Error" above this one line.
            raise RuntimeError(f"changefeed: {exc}") from None


def _spark_session_project() -> Any:
    """dbt's loaded project when this command starts a local Spark session (a command that
    connects, on a target of dbt-spark's ``method: session``, in a process that runs no
    Spark driver yet), else None. Read from dbt's
    own state; anything missing from it (another dbt-core's internals, a programmatic
    invocation without a profile) means None, so that the plugin never stands in a
    command's way."""
    import click
    from dbt.flags import get_flags

    command = getattr(get_flags(), "WHICH", None)  # type: ignore[no-untyped-call]
    if command is None or command in _NO_CONNECTION:
        return None
    context = click.get_current_context(silent=True)
    obj: Any = getattr(context, "obj", None)
    if not isinstance(obj, dict):
        return None
    credentials = getattr(obj.get("profile"), "credentials", None)
    method = getattr(credentials, "method", None)
    if (
        getattr(credentials, "type", None) != "spark"
        or str(getattr(method, "value", method)) != "session"
    ):
        return None
    if _spark_running():
        return None
    return obj.get("project")


def _spark_running() -> bool:
    """Whether this process runs a Spark driver already (dbt invoked from Python beside
    it): dbt-spark's session is then that one, whatever ``SPARK_CONF_DIR`` says, and no
    Spark starts. Without pyspark imported there is none."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None)
    # The attribute PySpark's own getOrCreate consults for the process's one context.
    return getattr(context, "_active_spark_context", None) is not None


def _uses_changefeed(project: Any) -> bool:
    """Whether the project has this dbt package installed (``dbt deps``), by its name."""
    root = getattr(project, "project_root", None)
    packages = getattr(project, "packages_install_path", None)
    if not isinstance(root, str) or not isinstance(packages, str):
        return False
    return (Path(root) / packages / "changefeed" / "dbt_project.yml").is_file()


def _say(line: str) -> None:
    print(f"changefeed: {line}", file=sys.stderr, flush=True)


#: What dbt reads from this module: the plugin classes it creates.
plugins = [SharedCatalogCheck]
