"""changefeed's dbt plugin: the shared catalog is checked before dbt starts Spark.

dbt imports every top-level module whose name starts with ``dbt_`` and creates each class
in its ``plugins`` list once it has loaded the project, before it registers the adapter
or parses a model (``dbt.plugins``: an interface dbt-core calls experimental, the same
in dbt-core 1.10 and 1.11; the suite runs 1.11). Installing changefeed installs this
module, so every dbt command of the environment runs :class:`SharedCatalogCheck`.

It acts only where dbt would start a Spark driver on the shared catalog: a target of
dbt-spark's ``method: session`` with ``SPARK_CONF_DIR`` naming a catalog that
``changefeed catalog init`` wrote (:func:`changefeed.local.catalog.configured`). There it
does what the catalog's ``spark-env.sh`` would do at the driver's launch, but before
Spark: a catalog stopped by ``changefeed catalog stop`` fails the command in one line
naming ``changefeed catalog init``, and a server that is down after a reboot is started
(:func:`changefeed.local.catalog.before_spark`). Past that point dbt reports the failure
as Spark's, in a dozen lines of its own around it. Any other command or target costs
a few attribute reads.
"""

from __future__ import annotations

import sys
from typing import Any

from dbt.plugins.manager import dbtPlugin

__all__ = ["SharedCatalogCheck", "plugins"]

#: Commands that never open a connection, so never start Spark.
_NO_CONNECTION = frozenset({"clean", "deps", "list", "ls", "parse", "serve"})


class SharedCatalogCheck(dbtPlugin):
    """Fails a dbt command at once, in one line naming the fix, when the Spark session it
    would start needs the shared catalog and the catalog's server is stopped."""

    def initialize(self) -> None:
        if not _spark_session_command():
            return
        from changefeed.local import catalog

        try:
            shared = catalog.configured()  # a catalog directory gone says so too
            if shared is not None:
                catalog.before_spark(shared, announce=_say)
        except catalog.CatalogError as exc:
            # dbt prints its own "Runtime Error" above this one line.
            raise RuntimeError(f"changefeed: {exc}") from None


def _spark_session_command() -> bool:
    """Whether this dbt command starts a local Spark session: a command that connects, on
    a target of dbt-spark's ``method: session``. Read from dbt's own state; anything
    missing from it (another dbt-core's internals, a programmatic invocation without a
    profile) means no, so that the plugin never stands in a command's way."""
    import click
    from dbt.flags import get_flags

    command = getattr(get_flags(), "WHICH", None)  # type: ignore[no-untyped-call]
    if command is None or command in _NO_CONNECTION:
        return False
    context = click.get_current_context(silent=True)
    obj: Any = getattr(context, "obj", None)
    profile = obj.get("profile") if isinstance(obj, dict) else None
    credentials = getattr(profile, "credentials", None)
    method = getattr(credentials, "method", None)
    return (
        getattr(credentials, "type", None) == "spark"
        and str(getattr(method, "value", method)) == "session"
    )


def _say(line: str) -> None:
    print(f"changefeed: {line}", file=sys.stderr, flush=True)


#: What dbt reads from this module: the plugin classes it creates.
plugins = [SharedCatalogCheck]
