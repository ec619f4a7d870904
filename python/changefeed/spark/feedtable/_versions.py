"""A landed table's schema versions (docs/protocol.md 11.11): which payload columns each
batch has, recorded in the table's properties by the landing that changed them.

* ``changefeed.schema.version``: the current version (a table without it is at version 1,
  the columns it was created with);
* ``changefeed.schema.v<N>``, for every version after the first: JSON ``{"first_batch": B,
  "added": [...], "dropped": [...], "widened": {column: type before}}``, batches ``B`` and
  above have version N's columns;
* ``changefeed.source.columns``: JSON ``{column: number}``, the source's own number of
  each landed payload column (PostgreSQL's ``attnum``, SQL Server's ``column_id``), which
  tells a rename from a drop and an add; split over ``changefeed.source.columns.part.<i>``
  (``.parts`` of them) where it is long, as Spark splits a schema in its own properties.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from changefeed.spark.feedtable._catalog import sql_string

VERSION_PROPERTY = "changefeed.schema.version"
VERSION_PREFIX = "changefeed.schema.v"
NUMBERS_PROPERTY = "changefeed.source.columns"
#: A property value's longest part: metastores of older Hive schemas hold 4,000 characters.
PART_CHARS = 3000


@dataclass(frozen=True)
class SchemaVersion:
    """One schema version of a landed table: batches ``first_batch`` and above have its
    columns (up to the next version's ``first_batch``). Version 1 is the table's columns
    as created; each later one lists what changed: payload columns ``added`` (null in
    earlier batches), ``dropped`` (kept in the table, null from ``first_batch`` on), and
    ``widened`` (column: its type before)."""

    version: int
    first_batch: int
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    widened: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {"first_batch": self.first_batch, "added": list(self.added),
             "dropped": list(self.dropped), "widened": dict(self.widened)},
            separators=(",", ":"),
        )  # fmt: skip


def table_properties(spark: Any, table_sql: str) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in spark.sql(f"show tblproperties {table_sql}").collect()}


def schema_versions(properties: Mapping[str, str]) -> list[SchemaVersion]:
    """The versions recorded in a table's ``properties``, oldest first; a table without
    any is at version 1 from batch 1."""
    current = int(properties.get(VERSION_PROPERTY, "1"))
    found = [SchemaVersion(1, 1)]
    for number in range(2, current + 1):
        text = properties.get(f"{VERSION_PREFIX}{number}")
        if text is None:
            raise ValueError(
                f"the table's property {VERSION_PROPERTY} is {current} but "
                f"{VERSION_PREFIX}{number} is missing: the properties were edited by hand"
            )
        value = json.loads(text)
        found.append(
            SchemaVersion(
                number, int(value["first_batch"]), tuple(value.get("added", ())),
                tuple(value.get("dropped", ())), dict(value.get("widened", {})),
            )
        )  # fmt: skip
    return found


def dropped_columns(found: Sequence[SchemaVersion]) -> set[str]:
    """The payload columns the versions leave dropped (a later version may add one back)."""
    gone: set[str] = set()
    for version in found:
        gone -= set(version.added)
        gone |= set(version.dropped)
    return gone


def source_numbers(properties: Mapping[str, str]) -> dict[str, int] | None:
    """The recorded source column numbers, or None where none are recorded (a table
    landed before they were, or of a feed without payload)."""
    if NUMBERS_PROPERTY in properties:
        text = properties[NUMBERS_PROPERTY]
    elif f"{NUMBERS_PROPERTY}.parts" in properties:
        parts = int(properties[f"{NUMBERS_PROPERTY}.parts"])
        text = "".join(properties[f"{NUMBERS_PROPERTY}.part.{i}"] for i in range(parts))
    else:
        return None
    return {str(k): int(v) for k, v in json.loads(text).items()}


def numbers_properties(numbers: Mapping[str, int]) -> dict[str, str]:
    """The properties that record ``numbers`` (:func:`source_numbers` reads them back).

    >>> numbers_properties({"id": 1, "v": 3})
    {'changefeed.source.columns': '{"id":1,"v":3}'}
    >>> props = numbers_properties({f"c{i:04}": i for i in range(400)})
    >>> props["changefeed.source.columns.parts"], source_numbers(props)["c0399"]
    ('2', 399)
    """
    text = json.dumps(dict(numbers), separators=(",", ":"))
    if len(text) <= PART_CHARS:
        return {NUMBERS_PROPERTY: text}
    parts = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
    found = {f"{NUMBERS_PROPERTY}.part.{i}": part for i, part in enumerate(parts)}
    found[f"{NUMBERS_PROPERTY}.parts"] = str(len(parts))
    return found


def properties_sql(properties: Mapping[str, str]) -> str:
    """``'key' = 'value', ...`` for ``tblproperties (...)``."""
    return ", ".join(f"'{sql_string(k)}' = '{sql_string(v)}'" for k, v in properties.items())
