"""The fenced code blocks of README.md, docs/*.md and examples/shop/README.md.

Shared by tests/test_docs_samples.py (which checks that every block is run or checked)
and the tests that run a block themselves (``sample("ID")``).
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"<!--\s*(?P<kind>sample|output):\s*(?P<id>[\w.-]+)\s*-->")


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    info: str
    text: str
    kind: str | None
    id: str | None

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.text.encode()).hexdigest()[:12]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[str]:
    docs = sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))
    return ["README.md", *docs, "examples/shop/README.md"]


def parse_blocks(relative: str) -> list[Block]:
    lines = (REPO / relative).read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = match.group("indent"), match.group("fence")
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = MARKER.search(lines[j]) if j >= 0 else None
        body: list[str] = []
        k = i + 1
        while k < len(lines):
            stripped = lines[k].strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            body.append(lines[k][len(indent) :] if lines[k].startswith(indent) else lines[k])
            k += 1
        blocks.append(
            Block(
                relative,
                i + 1,
                match.group("info").strip(),
                "\n".join(body) + "\n",
                marker.group("kind") if marker else None,
                marker.group("id") if marker else None,
            )
        )
        i = k + 1
    return blocks


@cache
def all_blocks() -> tuple[Block, ...]:
    return tuple(b for f in doc_files() for b in parse_blocks(f))


def sample(sample_id: str) -> str:
    """The exact text of the block marked ``<!-- sample|output: sample_id -->``."""
    found = [b for b in all_blocks() if b.id == sample_id]
    assert len(found) == 1, f"{len(found)} blocks are marked {sample_id!r}"
    return found[0].text


def block(file: str, digest: str) -> str:
    """The exact text of another owner's block, found by the digest of its text."""
    found = [b for b in all_blocks() if b.file == file and b.digest == digest]
    assert found, f"{file} has no block with digest {digest} any more: update OTHERS"
    return found[0].text


def in_this_checkout(command: str) -> str:
    """A documented ``PYTHONPATH=examples/shop .venv/bin/python ...`` line, run with this
    interpreter (the repository's .venv under ``make test``) and this checkout's package."""
    prefix = "PYTHONPATH=examples/shop .venv/bin/python "
    assert command.startswith(prefix), command
    return (
        f"PYTHONPATH=examples/shop:{REPO / 'python'} {sys.executable} {command[len(prefix):]}"
    )
