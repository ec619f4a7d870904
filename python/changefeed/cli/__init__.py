"""The ``changefeed`` command. One module per subcommand, each with ``add_parser`` and ``run``.

    changefeed land --connection postgresql://app@db/shop --feed shop.orders \\
        --table landing.orders_feed [--payload] [--continuous --interval 60]

Subcommands register themselves in :data:`SUBCOMMANDS` (module name -> module path);
adding one is adding a module with ``add_parser(subparsers)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from changefeed import __version__

#: Subcommand name -> module that implements it (``add_parser``, ``run``).
SUBCOMMANDS: dict[str, str] = {
    "land": "changefeed.cli.land",
    "status": "changefeed.cli.status",
    "barrier": "changefeed.cli.barrier",
}


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
    code: int = module.run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
