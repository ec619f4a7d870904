"""Spark feed tables of the shared catalog read without Spark: each shard's head (the
table's ``max(ulid)`` per shard, protocol 11.6) from the catalog's PostgreSQL metastore
and the table's own files, so that ``changefeed status --consumer`` starts no JVM.

Which files hold committed rows, by format (protocol 11.2):

* **parquet**: the partitions the metastore lists (registration is the commit); a
  directory a killed write left is not listed and not read;
* **Delta**: the files the table's log adds and does not remove, replayed from its last
  checkpoint (a classic one, single- or multi-part) and the commits after it.

The heads are read from the newest batch backwards until every wanted shard is found
(F3, as ``changefeed.spark.feedtable.feed_heads`` does), reading the ``shard_id`` and
``ulid`` columns of those files only. What this cannot read exactly is refused with
:class:`NeedsSpark` naming why, and the caller reads it with Spark: an Iceberg table (its
catalog is not the metastore), a location that is not a local path, a Delta table with
deletion vectors, column mapping or a V2 checkpoint.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from changefeed.dialects.postgres import metastore
from changefeed.local.catalog import Catalog, CatalogError, connect_metastore
from changefeed.spark.feedtable import BATCH_COLUMN, SHARD_COLUMN, ULID_COLUMN

__all__ = [
    "SESSION_CATALOG",
    "NeedsSpark",
    "TableNotInCatalog",
    "check_partitioned",
    "delta_files",
    "feed_heads",
    "newest_heads",
]

SESSION_CATALOG = "spark_catalog"


class NeedsSpark(CatalogError):
    """A table this module cannot read exactly; the message says why."""


class TableNotInCatalog(CatalogError):
    """The table is not in the shared catalog's metastore."""


def feed_heads(catalog: Catalog, table: str, shards: Iterable[int]) -> dict[int, bytes]:
    """Each wanted shard's head in ``table`` (``database.table``, or
    ``spark_catalog.database.table``), and the heads of other shards met on the way; a
    shard without rows is left out. Raises :class:`TableNotInCatalog` or
    :class:`NeedsSpark`."""
    database, name = _parse(table)
    with connect_metastore(catalog) as conn:
        found = metastore.table_entry(conn, database, name)
        if found is None:
            raise TableNotInCatalog(f"{database}.{name} is not in the shared catalog")
        table_id, location, provider, path = found
        provider = (provider or "hive").lower()
        if provider == "parquet":
            check_partitioned(metastore.table_params(conn, table_id), table)
            partitions = metastore.partitions(conn, table_id)
            files = {_batch(part): _parquet_files(_local(loc, table)) for part, loc in partitions}
        elif provider == "delta":
            files = delta_files(_local(path or location, table), table)
        else:
            raise NeedsSpark(f"{table} is a {provider} table")
    return newest_heads(files, shards)


def newest_heads(files: Mapping[int, Sequence[Path]], shards: Iterable[int]) -> dict[int, bytes]:
    """The heads from the files of the newest batches backwards, until every shard of
    ``shards`` is found (a shard's head is in the newest batch that has it, F3)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    wanted = set(shards)
    heads: dict[int, bytes] = {}
    for batch in sorted(files, reverse=True):
        if wanted <= heads.keys():
            break
        newest: dict[int, bytes] = {}
        for file in files[batch]:
            data = pq.read_table(file, columns=[SHARD_COLUMN, ULID_COLUMN])
            for shard, ulid in zip(
                data.column(SHARD_COLUMN).to_pylist(),
                data.column(ULID_COLUMN).to_pylist(),
                strict=True,
            ):
                if shard is not None and ulid is not None and ulid > newest.get(shard, b""):
                    newest[int(shard)] = bytes(ulid)
        for shard, ulid in newest.items():
            heads.setdefault(shard, ulid)
    return heads


def _parse(table: str) -> tuple[str, str]:
    parts = [p.strip().strip("`").lower() for p in table.split(".")]
    if len(parts) == 3 and parts[0] == SESSION_CATALOG:
        parts = parts[1:]
    if len(parts) == 3:
        raise NeedsSpark(f"{table} is in catalog {parts[0]}, not in the metastore")
    if len(parts) != 2 or not all(parts):
        raise TableNotInCatalog(f"{table} is not written database.table")
    return parts[0], parts[1]


def check_partitioned(params: Mapping[str, str], table: str) -> None:
    """A parquet table's metastore parameters must say it is partitioned by
    ``changefeed_batch`` alone (its batches are its partitions); else the heads need a
    read of the whole table, which Spark does.

    >>> check_partitioned({"spark.sql.sources.schema.numPartCols": "1",
    ...                    "spark.sql.sources.schema.partCol.0": "changefeed_batch"}, "t")
    >>> check_partitioned({}, "db.merged")
    Traceback (most recent call last):
    ...
    changefeed.local.catalog_tables.NeedsSpark: db.merged is not partitioned by changefeed_batch
    """
    count = int(params.get("spark.sql.sources.schema.numPartCols", "0"))
    columns = [params.get(f"spark.sql.sources.schema.partCol.{i}", "").lower()
               for i in range(count)]  # fmt: skip
    if columns != [BATCH_COLUMN]:
        raise NeedsSpark(f"{table} is not partitioned by {BATCH_COLUMN}")


def _batch(partition: str) -> int:
    key, _, value = partition.partition("=")
    if key.lower() != BATCH_COLUMN or not value.isdigit():
        raise NeedsSpark(f"partition {partition} is not a feed table's ({BATCH_COLUMN}=N)")
    return int(value)


def _local(location: str | None, table: str) -> Path:
    if not location:
        raise NeedsSpark(f"{table} has no location in the metastore")
    parsed = urllib.parse.urlsplit(location)
    if parsed.scheme not in ("", "file"):
        raise NeedsSpark(f"{table} lives on {parsed.scheme}://, not on a local path")
    return Path(urllib.parse.unquote(parsed.path))


def _parquet_files(directory: Path) -> list[Path]:
    """The data files of a committed partition (not hidden or marker files)."""
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", "."))
    )


def delta_files(root: Path, table: str) -> dict[int, list[Path]]:
    """Per batch, the data files of the table's current version."""
    log = root / "_delta_log"
    active: dict[str, int] = {}
    after = -1
    marker = log / "_last_checkpoint"
    if marker.is_file():
        checkpoint = json.loads(marker.read_text())
        after = int(checkpoint["version"])
        if "v2Checkpoint" in checkpoint:
            raise NeedsSpark(f"{table} has a V2 checkpoint")
        for action in _checkpoint_actions(log, after, checkpoint.get("parts"), table):
            _apply(action, active, table)
    versions = sorted(
        int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit() and len(p.name) == 25
    )
    for version in (v for v in versions if v > after):
        for line in (log / f"{version:020d}.json").read_text().splitlines():
            if line.strip():
                _apply(json.loads(line), active, table)
    files: dict[int, list[Path]] = {}
    for path, batch in active.items():
        files.setdefault(batch, []).append(root / urllib.parse.unquote(path))
    return files


def _checkpoint_actions(
    log: Path, version: int, parts: int | None, table: str
) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    if parts:
        names = [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet"
                 for i in range(1, parts + 1)]  # fmt: skip
    else:
        names = [f"{version:020d}.checkpoint.parquet"]
    actions: list[dict[str, Any]] = []
    for name in names:
        if not (log / name).is_file():
            raise NeedsSpark(f"{table}'s checkpoint {name} is not a classic checkpoint file")
        data = pq.read_table(log / name)
        kinds = [k for k in ("add", "remove", "metaData", "protocol") if k in data.column_names]
        for row in data.select(kinds).to_pylist():
            actions.extend({k: v} for k, v in row.items() if v is not None)
    return actions


def _apply(action: Mapping[str, Any], active: dict[str, int], table: str) -> None:
    if "metaData" in action:
        configuration = action["metaData"].get("configuration") or {}
        if isinstance(configuration, list):  # a map read from parquet
            configuration = dict(configuration)
        mode = configuration.get("delta.columnMapping.mode", "none")
        if mode != "none":
            raise NeedsSpark(f"{table} uses column mapping ({mode})")
    elif "add" in action:
        add = action["add"]
        if add.get("deletionVector"):
            raise NeedsSpark(f"{table} has deletion vectors")
        values = add.get("partitionValues") or {}
        if isinstance(values, list):
            values = dict(values)
        if not str(values.get(BATCH_COLUMN) or "").isdigit():
            raise NeedsSpark(f"{table} is not partitioned by {BATCH_COLUMN}")
        active[add["path"]] = int(values[BATCH_COLUMN])
    elif "remove" in action:
        active.pop(action["remove"]["path"], None)
