"""A strict parser of Prometheus text exposition (format 0.0.4), for the CLI tests.

Stricter than Prometheus itself where that catches mistakes: every family has exactly one
``# HELP`` and one ``# TYPE`` line, before its samples, and its samples are contiguous;
no sample repeats a (name, labels) pair; the text ends with a newline.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


@dataclass
class Family:
    name: str
    help: str
    type: str
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)

    def value(self, **labels: str) -> float:
        """The one sample whose labels include ``labels``."""
        found = [
            v for k, v in self.samples.items() if set(labels.items()) <= set(k)
        ]  # fmt: skip
        assert len(found) == 1, (self.name, labels, self.samples)
        return found[0]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text: str) -> dict[str, Family]:
    """Families by name; AssertionError naming the line for anything malformed."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    families: dict[str, Family] = {}
    current: Family | None = None
    pending_help: tuple[str, str] | None = None
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and help_text, where
            assert name not in families and pending_help is None, f"second HELP, {where}"
            pending_help = (name, help_text)
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert pending_help and pending_help[0] == name, f"TYPE without HELP, {where}"
            assert kind in _TYPES, where
            current = families[name] = Family(name, pending_help[1], kind)
            pending_help = None
        else:
            found = _SAMPLE.match(line)
            assert found, f"not a sample, {where}"
            assert current is not None and found.group(1) == current.name, f"stray sample, {where}"
            labels = tuple(
                (k, _unescape(v)) for k, v in re.findall(_LABEL, found.group(2) or "")
            )  # fmt: skip
            assert len({k for k, _ in labels}) == len(labels), f"repeated label, {where}"
            assert labels not in current.samples, f"repeated sample, {where}"
            value = float(found.group(len(found.groups())))
            assert not math.isnan(value), where
            current.samples[labels] = value
    assert pending_help is None, "HELP without TYPE at the end"
    return families
