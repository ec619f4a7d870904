"""Rewrites one benchmark's section of docs/performance.md, between its own markers, so that
several benchmarks share the file without touching each other's figures."""

from __future__ import annotations

from pathlib import Path


def write_section(doc: Path, begin: str, end: str, section: str) -> None:
    """Replace the text between ``begin`` and ``end`` in ``doc`` (appending both if absent)."""
    text = doc.read_text() if doc.exists() else "# Performance\n"
    block = f"{begin}\n{section}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
