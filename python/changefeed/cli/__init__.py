"""The ``changefeed`` command. One module per subcommand, each with ``add_parser`` and ``run``.

    changefeed land --connection postgresql://app@db/shop --feed shop.orders \\
        --table landing.orders_feed [--payload] [--continuous --interval 60]

Subcommands register themselves in :data:`SUBCOMMANDS` (module name -> module path);
adding one is adding a module with ``add_parser(subparsers)`` and ``run(args) -> int``.

Errors: a subcommand raises :class:`CliError` for anything the user can fix, and
:func:`main` prints it as one line, ``changefeed <command>: error: <cause>. <fix>``, on
stderr, without a traceback. Exit codes:

* 0 (:data:`EXIT_OK`): done;
* 1 (:data:`EXIT_ERROR`): an error, printed as above;
* 2: a bad command line (argparse prints the usage);
* 3 (:data:`EXIT_TIMEOUT`): ``changefeed barrier`` was not released within ``--timeout``;
* 4 (:data:`EXIT_DIFFERENT`): ``changefeed verify`` found a key that differs.

Only ``land``, ``snapshot``, ``verify``, ``catalog init``, ``status --consumer`` and
``retention --spark-table`` import PySpark: ``status``, ``barrier`` and ``retention`` work
with just the ``postgres`` extra installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from changefeed import __version__
from changefeed.errors import ChangefeedError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_TIMEOUT = 3
EXIT_DIFFERENT = 4

#: Subcommand name -> module that implements it (``add_parser``, ``run``).
SUBCOMMANDS: dict[str, str] = {
    "land": "changefeed.cli.land",
    "status": "changefeed.cli.status",
    "barrier": "changefeed.cli.barrier",
    "retention": "changefeed.cli.retention",
    "catalog": "changefeed.cli.catalog",
    "snapshot": "changefeed.cli.snapshot",
    "verify": "changefeed.cli.verify",
}


class CliError(ChangefeedError):
    """A failure the user can fix; the message names the cause and the fix."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def spark_missing(what: str, exc: ImportError) -> CliError:
    """The error of a command that needs the ``spark`` extra when an import failed."""
    return CliError(
        f"{what} needs Spark, and {exc.name or 'pyspark'} is not installed: "
        "pip install 'changefeed[spark]'"
    )


def first_line(exc: BaseException) -> str:
    """An exception's first line (Spark's go on for pages), for a one-line error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="changefeed",
        description="Race-safe change feeds for PostgreSQL and SQL Server tables.",
    )
    parser.add_argument("--version", action="version", version=f"changefeed {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_path in SUBCOMMANDS.values():
        importlib.import_module(module_path).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``changefeed`` script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command])
    try:
        code: int = module.run(args)
    except CliError as exc:
        print(f"changefeed {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return exc.code
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
