"""One Spark feed table (docs/protocol.md section 11) by its name.

:meth:`FeedTable.for_name` names a feed table as Delta's ``DeltaTable.forName`` names a
Delta table; the object answers what the format derives from the catalog: whether the
table exists, its format, its committed batches, each shard's head, the next batch, its
location, and it clears an orphaned location before a first write (11.5). The writers
(:func:`~changefeed.spark.feedtable.write_batch`, the landing), retention and the CLI all
ask through it, so each rule has one implementation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from changefeed.errors import ChangefeedError
from changefeed.spark.feedtable._catalog import quote, split_name, sql_string, table_exists
from changefeed.spark.feedtable._versions import SchemaVersion, schema_versions, table_properties

SHARD_COLUMN: Final = "shard_id"
ULID_COLUMN: Final = "ulid"
BATCH_COLUMN: Final = "changefeed_batch"
#: The table formats a Spark feed may have; the last two commit atomically (ACID).
FORMATS: Final = ("parquet", "delta", "iceberg")
#: The session's own catalog; a table in another catalog (``iceberg.db.t``) is Iceberg's.
SESSION_CATALOG: Final = "spark_catalog"
#: The schema listing's names for a schema's location, by Spark version and catalog.
_LOCATION_KEYS = ("location", "database location", "namespace location")


class FeedTableNameError(ChangefeedError, ValueError):
    """A name that is not ``catalog.database.table``, ``database.table`` or ``table``."""


def _parts(name: str) -> list[str]:
    """The one, two or three parts of a table name; raises :class:`FeedTableNameError`."""
    try:
        parts = [p.strip() for p in split_name(str(name).strip())]
    except ValueError:
        parts = []
    if not parts or len(parts) > 3 or not all(parts):
        raise FeedTableNameError(
            f"a feed table is named database.table, catalog.database.table (e.g. "
            f"iceberg.landing.orders) or table (in the current database); got {name!r}"
        )
    return parts


@dataclass(frozen=True)
class TableName:
    """A table's database and name, and its catalog unless it is the session's own (both
    spellings of one table are one name, so one writer lock, F4)."""

    database: str
    table: str
    catalog: str | None = None

    @classmethod
    def parse(cls, spark: Any, name: str) -> TableName:
        """``catalog.database.table``, ``database.table`` or ``table`` (in the session's
        current database), parts optionally in backticks."""
        parts = _parts(name)
        if len(parts) == 1:
            return cls(spark.catalog.currentDatabase(), parts[0])
        return cls._qualified(parts)

    @classmethod
    def parse_qualified(cls, name: str) -> TableName | None:
        """As :meth:`parse`, without Spark: None for a bare ``table``, whose database only
        the session knows (its current one). A malformed name raises as in :meth:`parse`."""
        parts = _parts(name)
        return None if len(parts) == 1 else cls._qualified(parts)

    @classmethod
    def _qualified(cls, parts: list[str]) -> TableName:
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        catalog = None if parts[0].lower() == SESSION_CATALOG else parts[0]
        return cls(parts[1], parts[2], catalog)

    @property
    def namespace_sql(self) -> str:
        """The database's name for SQL, with its catalog if it has one."""
        database = quote(self.database)
        return f"{quote(self.catalog)}.{database}" if self.catalog else database

    @property
    def sql(self) -> str:
        """The name for SQL, each part quoted."""
        return f"{self.namespace_sql}.{quote(self.table)}"

    @property
    def text(self) -> str:
        """The name for messages and lock names."""
        name = f"{self.database}.{self.table}"
        return f"{self.catalog}.{name}" if self.catalog else name

    @property
    def in_session_catalog(self) -> bool:
        return self.catalog is None or self.catalog.lower() == SESSION_CATALOG

    def with_suffix(self, suffix: str) -> TableName:
        """The table of the same database named ``<table><suffix>`` (a helper table)."""
        return TableName(self.database, self.table + suffix, self.catalog)


class FeedTable:
    """A Spark feed table: ``(shard_id int, ulid binary, <columns>, changefeed_batch
    bigint)`` partitioned by ``changefeed_batch``, in parquet, Delta or Iceberg."""

    def __init__(self, spark: Any, name: TableName) -> None:
        self.spark = spark
        self.name = name

    @classmethod
    def for_name(cls, spark: Any, name: str | TableName) -> FeedTable:
        """The feed table ``name`` (:meth:`TableName.parse`); nothing is read yet, and the
        table need not exist. Raises :class:`FeedTableNameError` for a malformed name."""
        if isinstance(name, TableName):
            return cls(spark, name)
        return cls(spark, TableName.parse(spark, name))

    def __repr__(self) -> str:
        return f"FeedTable({self.name.text!r})"

    def exists(self) -> bool:
        """Whether the catalog holds the table (:func:`table_exists`: a catalog that fails
        to answer raises ``CatalogUnavailable``, never reads as a missing table)."""
        return table_exists(self.spark, self.name.sql)

    def format(self) -> str:
        """``parquet``, ``delta`` or ``iceberg``: the existing table's provider (anything
        else is refused, naming the formats)."""
        for row in self.spark.sql(f"describe table extended {self.name.sql}").collect():
            if str(row[0]).strip().lower() == "provider":
                provider = str(row[1]).strip().lower()
                if provider in FORMATS:
                    return provider
                raise ValueError(
                    f"{self.name.text} is a {provider} table; a Spark feed is {', '.join(FORMATS)}"
                )
        return "parquet"

    def properties(self) -> dict[str, str]:
        """The table's properties (``show tblproperties``)."""
        return table_properties(self.spark, self.name.sql)

    def schema_versions(self) -> list[SchemaVersion]:
        """The table's schema versions, oldest first (:class:`SchemaVersion`): which
        payload columns each batch has. A table whose source's columns never changed
        since it was created has one, version 1 from batch 1."""
        return schema_versions(self.properties())

    def refresh(self) -> None:
        """Forget cached files and partitions: another session may have committed."""
        self.spark.sql(f"refresh table {self.name.sql}")

    def committed_batches(self, fmt: str | None = None) -> list[int]:
        """The committed batch numbers, ascending, with no data read (``fmt``: the
        table's format when known). parquet: the metastore's partition list, where
        registration is the commit. Delta and Iceberg commit atomically and have no
        partition list in the metastore: the range from the lowest to the highest batch,
        from ``min``/``max`` of the partition column (answered from file statistics); a
        feed's batches are contiguous, since each write is 1 + the highest and retention
        removes the lowest."""
        if (fmt or self.format()) != "parquet":
            found = self._min_max()
            return [] if found is None else list(range(found[0], found[1] + 1))
        batches = []
        for row in self.spark.sql(f"show partitions {self.name.sql}").collect():
            key, _, value = str(row[0]).partition("=")
            if key.lower() != BATCH_COLUMN or not value.isdigit():
                raise ValueError(
                    f"{self.name.text} has the partition {row[0]!r}; a Spark feed is "
                    f"partitioned by {BATCH_COLUMN} and nothing else (docs/protocol.md 11.1)"
                )
            batches.append(int(value))
        return sorted(batches)

    def batch_range(self, fmt: str | None = None) -> tuple[int, int] | None:
        """The lowest and highest committed batch of the existing table, after a refresh;
        None if it has none."""
        self.refresh()
        fmt = fmt or self.format()
        if fmt != "parquet":
            return self._min_max()
        batches = self.committed_batches(fmt)
        return (batches[0], batches[-1]) if batches else None

    def _min_max(self) -> tuple[int, int] | None:
        row = self.spark.sql(
            f"select min({BATCH_COLUMN}), max({BATCH_COLUMN}) from {self.name.sql}"
        ).first()
        return None if row[0] is None else (int(row[0]), int(row[1]))

    def heads(self, shards: Iterable[int] | None = None) -> dict[int, bytes]:
        """Each shard's head (= safe point): ``max(ulid)`` over the committed rows; empty
        for a table that does not exist yet. With ``shards``, only the newest batches
        that hold them are read (:meth:`newest_heads`)."""
        if not self.exists():
            return {}
        return self.committed_heads(shards, self.format())[0]

    def committed_heads(
        self, shards: Iterable[int] | None, fmt: str
    ) -> tuple[dict[int, bytes], int]:
        """The heads of ``shards`` and the highest batch of the existing table of format
        ``fmt``, after a refresh (partitions registered by another session are listed)."""
        self.refresh()
        batches = self.committed_batches(fmt)
        return self.newest_heads(batches, shards), max(batches, default=0)

    def newest_heads(self, batches: list[int], shards: Iterable[int] | None) -> dict[int, bytes]:
        """Heads read from the newest of ``batches`` backwards, in ranges that double (1,
        2, 4, ... batches), until every shard of ``shards`` is found; all batches when
        ``shards`` is None. Each range is a literal partition filter, so Spark reads only
        its partitions; a shard's head is in the newest batch that has the shard (F3)."""
        wanted = None if shards is None else set(shards)
        heads: dict[int, bytes] = {}
        end, size = len(batches), 1
        while end > 0 and (wanted is None or not wanted <= heads.keys()):
            start = 0 if wanted is None else max(0, end - size)
            rows = self.spark.sql(
                f"select {SHARD_COLUMN}, max({ULID_COLUMN}) as head from {self.name.sql} "
                f"where {BATCH_COLUMN} between {batches[start]} and {batches[end - 1]} "
                f"and {SHARD_COLUMN} is not null group by {SHARD_COLUMN}"
            ).collect()
            for row in rows:
                # a newer range has already given the shard's head (F3)
                heads.setdefault(int(row[0]), bytes(row[1]))
            end, size = start, size * 2
        return heads

    def next_batch(self) -> int:
        """The batch number of the next write: 1 + the highest committed batch (1 if
        none, or if the table does not exist)."""
        if not self.exists():
            return 1
        return max(self.committed_batches(), default=0) + 1

    def _catalog(self) -> str:
        # named, so that a current catalog other than the session's changes nothing
        return self.name.catalog or SESSION_CATALOG

    def schema_location(self) -> str:
        """The location of the table's database, as the catalog gives it (a URI)."""
        namespace = f"{quote(self._catalog())}.{quote(self.name.database)}"
        for row in self.spark.sql(f"describe schema extended {namespace}").collect():
            if str(row[0]).strip().lower() in _LOCATION_KEYS:
                return str(row[1]).strip()
        raise ValueError(f"could not find the location of schema {self.name.database}")

    def location(self) -> str | None:
        """The existing table's location as its catalog gives it (a URI), or None."""
        for row in self.spark.sql(f"describe table extended {self.name.sql}").collect():
            if str(row[0]).strip().lower() == "location":
                return str(row[1]).strip()
        return None

    def clear_orphan_location(self) -> None:
        """Delete the managed location of a table that is not in the catalog (protocol
        11.5): a killed ``create table ... as select`` leaves files there, after which
        Spark refuses to create the table. Does nothing if the table exists (as
        :meth:`exists` says: a catalog that fails to answer raises), or if the location
        is known to be missing. Only for the session catalog's managed tables."""
        if self.exists():
            return
        path = self.schema_location().rstrip("/") + "/" + self.name.table.lower()
        if _path_exists(self.spark, path) is False:
            return
        cleanup = TableName(
            self.name.database, self.name.table.lower() + "__changefeed_cleanup", self._catalog()
        )
        self.spark.sql(f"create table if not exists {cleanup.sql} (x int) using parquet")
        self.spark.sql(f"alter table {cleanup.sql} set location '{sql_string(path)}'")
        # Empties the location, and creates it where it was not known to exist (Spark
        # Connect): dropping a table whose location does not exist logs "ERROR FileUtils:
        # Failed to delete".
        self.spark.sql(f"truncate table {cleanup.sql}")
        self.spark.sql(f"drop table if exists {cleanup.sql}")


def _path_exists(spark: Any, path: str) -> bool | None:
    """Whether ``path`` exists (the session's Hadoop file system); None if unknown (Spark
    Connect has no JVM handle): then the cleanup runs anyway."""
    try:
        context = spark.sparkContext
        hadoop_path = context._jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(context._jsc.hadoopConfiguration())
        return bool(fs.exists(hadoop_path))
    except Exception:
        return None
