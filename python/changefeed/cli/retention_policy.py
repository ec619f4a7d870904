"""The retention policy of ``changefeed retention`` (``--max-age``, ``--keep-last``),
checked the same way for a database feed and a Spark feed table."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

from changefeed.cli import CliError

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> timedelta:
    """``--max-age`` as a timedelta.

    >>> parse_age("7d"), parse_age("90"), parse_age("1.5h")
    (datetime.timedelta(days=7), datetime.timedelta(seconds=90), datetime.timedelta(seconds=5400))
    """
    found = _AGE.match(text)
    if not found:
        raise CliError(
            f"--max-age {text!r} is not an age: write a number with s, m, h or d (e.g. 7d, "
            "36h, 90m), or plain seconds"
        )
    return timedelta(seconds=float(found.group(1)) * _UNIT_SECONDS[found.group(2)])


def check_policy(args: argparse.Namespace) -> timedelta | None:
    """Check ``--max-age`` and ``--keep-last``; return the age (None: not given)."""
    if args.max_age is None and args.keep_last is None:
        raise CliError(
            "retention needs a policy: --max-age (remove events older than this), "
            "--keep-last (keep the newest N events of each shard), or both"
        )
    if args.keep_last is not None and args.keep_last < 0:
        raise CliError(f"--keep-last must be 0 or more, got {args.keep_last}")
    return None if args.max_age is None else parse_age(args.max_age)
