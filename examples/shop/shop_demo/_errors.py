"""The demo's one error type: a message that names the cause and the fix."""

from __future__ import annotations


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and what to do."""
