"""Compare a feed's source table with a current-state model (docs/protocol.md section 13).

The steps, in this order (the order is the argument of V1):

1. the model's position: ``C``, the feed batch of its cursor's newest row;
2. one full outer join, on the key, of the source (read now in key chunks, as a
   snapshot reads it) and the model's live rows (not deleted; a history's open
   versions), persisted: every key is equal, changed, missing from the model, extra in
   it, or held more than once by it;
3. a read barrier on every shard of the feed, taken after the source was read;
4. the keys of every event after the model's position: the landed table's batches
   ``> C`` and the feed's events after the landed table's head (and after what retention
   removed) up to the safe point the barrier released. A differing key among them is in
   flight (a later ``dbt run`` applies it); any other differing key is a difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from changefeed.errors import ChangefeedError

#: Differences listed with both sides' values; the counts cover all of them.
MAX_KEYS = 20
#: Seconds the read barrier of step 3 may wait for writes in flight on each shard.
BARRIER_TIMEOUT = 60.0
#: Events per ``read_feed`` page when reading the keys of step 4.
PAGE_SIZE = 10_000

EQUAL, CHANGED, MISSING, EXTRA, DUPLICATE = "equal", "changed", "missing", "extra", "duplicate"
#: The kinds of a difference, in the order a report lists them.
KINDS = (CHANGED, MISSING, EXTRA, DUPLICATE)

_KIND, _IN_SOURCE, _COPIES, _SOURCE, _MODEL = (
    "_cf_kind", "_cf_in_source", "_cf_copies", "_cf_source", "_cf_model",
)  # fmt: skip


class VerifyError(ChangefeedError, ValueError):
    """The comparison cannot run (a missing table, a model that is not a state model, a
    key the model lacks, a barrier not released); the message names the cause and the
    fix."""


@dataclass(frozen=True)
class Difference:
    """One key whose source row and model row differ (``kind``: changed, missing from
    the model, extra in it, or duplicate: the model holds the key ``copies`` times).
    ``source`` and ``model`` map each compared column to its value; None where the side
    has no row."""

    kind: str
    key: Mapping[str, Any]
    source: Mapping[str, Any] | None
    model: Mapping[str, Any] | None
    copies: int = 1

    def line(self) -> str:
        key = ", ".join(f"{k}={v!r}" for k, v in self.key.items())
        if self.kind == MISSING:
            return f"missing {key}: in the source, not in the model"
        if self.kind == EXTRA:
            return f"extra {key}: in the model, not in the source"
        if self.kind == DUPLICATE:
            return f"duplicate {key}: {self.copies} rows in the model"
        source, model = self.source or {}, self.model or {}
        changed = [c for c in source if source[c] != model.get(c)]
        what = "; ".join(f"{c} {source[c]!r} in the source, {model.get(c)!r} in the model"
                         for c in changed)  # fmt: skip
        return f"changed {key}: {what}"


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify` found. ``ok``: no difference (keys in flight are not
    differences)."""

    feed: str
    model: str
    landed_table: str
    model_batch: int
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    not_compared: tuple[str, ...]
    source_rows: int
    model_rows: int
    equal: int
    in_flight: int
    counts: Mapping[str, int] = field(default_factory=dict)
    differences: tuple[Difference, ...] = ()

    @property
    def different(self) -> int:
        return sum(self.counts.get(k, 0) for k in KINDS)

    @property
    def ok(self) -> bool:
        return self.different == 0

    def lines(self) -> list[str]:
        """The report ``changefeed verify`` prints."""
        position = f"feed batch {self.model_batch:,}" if self.model_batch else "no batch yet"
        compared = ", ".join([*(f"{k} (key)" for k in self.keys), *self.columns])
        out = [
            f"{self.feed} against {self.model} (consumed up to {position} of "
            f"{self.landed_table}): {self.source_rows:,} source rows, {self.model_rows:,} "
            f"model rows",
            f"compared: {compared}",
        ]
        if self.not_compared:
            out.append(f"not in the model, not compared: {', '.join(self.not_compared)}")
        summary = f"{self.equal:,} equal"
        if self.in_flight:
            summary += (f", {self.in_flight:,} in flight (written after the model's position: "
                        "its next dbt run applies them)")  # fmt: skip
        if self.ok:
            out.append(f"{summary}; no difference")
            return out
        kinds = ", ".join(f"{self.counts[k]:,} {k}" for k in KINDS if self.counts.get(k))
        out.append(f"{summary}; {self.different:,} different ({kinds})")
        out.extend(d.line() for d in self.differences)
        if self.different > len(self.differences):
            out.append(f"... {self.different - len(self.differences):,} more")
        return out


def verify(
    spark: Any,
    source_options: Mapping[str, str],
    model: str,
    landed_table: str,
    *,
    max_keys: int = MAX_KEYS,
    chunk_rows: int | None = None,
    barrier_timeout: float = BARRIER_TIMEOUT,
) -> VerifyResult:
    """Compare the source table of the feed of ``source_options`` (``connection``,
    ``feed``, optionally ``password`` and ``changefeedSchema``) with ``model``, a
    ``changefeed_current_state`` or ``changefeed_history`` model of the feed landed as
    ``landed_table``: the steps of the module doc. Reads the source once (in key chunks,
    without blocking writers) and the model once; keeps the join of both in Spark's
    cache (memory, then disk) until it returns. Raises :class:`VerifyError`, or the
    source's ``ChangefeedSourceError`` for the connection and the feed (both
    :class:`~changefeed.errors.ChangefeedError`)."""
    from pyspark import StorageLevel

    from changefeed.spark.feedtable import feed_heads
    from changefeed.spark.landing import source_frame
    from changefeed.spark.source import open_backend, parse_options

    if max_keys < 0:
        raise VerifyError(f"max_keys must be 0 or more, got {max_keys}")
    options = parse_options({**source_options, "payload": "true"})
    with open_backend(options.connection, options.changefeed_schema) as backend:
        info = backend.describe(options.feed, True)
        keys = tuple(k.name for k in info.keys)
        state = _model_frame(spark, model)
        batch = _cursor_batch(spark, model)
        _require_landed(spark, landed_table)
        columns, missing = _compared(state, keys, [c.name for c in info.payload or ()], model)
        source = _typed(source_frame(spark, source_options, **_chunks(chunk_rows)), state,
                        keys, columns)  # fmt: skip
        joined = _join(source, _live(state, keys, columns), keys).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        try:
            counts = {str(r[0]): (int(r[1]), int(r[2]), int(r[3]))
                      for r in joined.groupBy(_KIND).agg(*_sums()).collect()}  # fmt: skip
            source_rows = sum(c[1] for c in counts.values())
            model_rows = sum(c[2] for c in counts.values())
            kinds = {kind: c[0] for kind, c in counts.items()}
            in_flight, real = 0, dict(kinds)
            differences: tuple[Difference, ...] = ()
            if any(kinds.get(k) for k in KINDS):
                shards = backend.shards(info)
                for shard in shards:
                    try:
                        backend.barrier_wait(info, shard, barrier_timeout)
                    except ChangefeedError as exc:
                        raise VerifyError(
                            f"feed {options.feed} shard {shard}: the read barrier was not "
                            f"released within {barrier_timeout:g} s ({exc}): a write is "
                            "pending; verify again once it has committed or been burned, or "
                            "allow longer (--barrier-timeout)"
                        ) from None
                keys_info = backend.describe(options.feed, False)
                landed = feed_heads(spark, landed_table, shards)
                after = _feed_keys(backend, keys_info, shards, landed)
                flying = _in_flight(spark, landed_table, batch, keys, after, state)
                real, differences = _differences(joined, flying, keys, columns, max_keys)
                in_flight = sum(kinds.get(k, 0) for k in KINDS) - sum(real.values())
        finally:
            joined.unpersist()
    return VerifyResult(
        feed=options.feed, model=model, landed_table=landed_table, model_batch=batch,
        keys=keys, columns=tuple(n for n, _ in columns), not_compared=tuple(missing),
        source_rows=source_rows, model_rows=model_rows, equal=kinds.get(EQUAL, 0),
        in_flight=in_flight, counts={k: real.get(k, 0) for k in KINDS},
        differences=differences,
    )  # fmt: skip


def _chunks(chunk_rows: int | None) -> dict[str, int]:
    return {} if chunk_rows is None else {"chunk_rows": chunk_rows}


def _table(spark: Any, name: str, what: str, fix: str) -> Any:
    try:
        return spark.table(name)
    except Exception as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            raise VerifyError(f"{what} {name} does not exist: {fix}") from None
        raise


def _model_frame(spark: Any, model: str) -> Any:
    return _table(spark, model, "model", "name a changefeed_current_state or changefeed_history "
                  "model as Spark does (database.table, or catalog.database.table)")  # fmt: skip


def _cursor_batch(spark: Any, model: str) -> int:
    """``C``: the feed batch of the cursor's newest row (protocol 11.8), 0 without one."""
    cursor = _table(
        spark, f"{model}__changefeed_cursor", "the model's cursor table",
        f"{model} is not a changefeed_current_state or changefeed_history model (or it has "
        "never run: dbt run it first)",
    )  # fmt: skip
    newest = cursor.orderBy(cursor["changefeed_batch"].desc()).limit(1).collect()
    return int(newest[0]["changefeed_feed_batch"]) if newest else 0


def _require_landed(spark: Any, landed_table: str) -> None:
    """Refuse a landed table that does not exist, before anything is read."""
    _table(spark, landed_table, "landed table",
           "name the table the feed is landed into (changefeed land --table)")  # fmt: skip


def _field(schema: Any, name: str) -> Any:
    """The field of ``schema`` named ``name`` as Spark resolves it (case-insensitively)."""
    for f in schema.fields:
        if f.name.lower() == name.lower():
            return f
    return None


def _compared(
    state: Any, keys: Sequence[str], source_columns: Sequence[str], model: str
) -> tuple[list[tuple[str, Any]], list[str]]:
    """The compared columns: per source column that is not a key, the model's column of
    that name (other than that struct), else the field of that name in its ``payload``
    struct; and the source columns the model has in neither place."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    for key in keys:
        if _field(state.schema, key) is None:
            raise VerifyError(
                f"model {model} has no column {key}, the feed's key: verify compares the "
                "rows of a state model keyed by the source's key (unique_key)"
            )
    payload = _field(state.schema, "payload")
    nested = payload.dataType if payload and isinstance(payload.dataType, T.StructType) else None
    columns, missing = [], []
    for name in source_columns:
        if any(name.lower() == k.lower() for k in keys):
            continue
        top = _field(state.schema, name)
        inner = _field(nested, name) if nested is not None else None
        # a source column named payload is the struct's field, not the struct itself
        if top is not None and top.name.lower() not in _STATE_COLUMNS and top is not payload:
            columns.append((name, F.col(f"`{top.name}`")))
        elif inner is not None:
            columns.append((name, F.col(f"`{payload.name}`").getField(inner.name)))
        else:
            missing.append(name)
    return columns, missing


#: The columns a state materialization adds (protocol 11.8): never a source column's.
_STATE_COLUMNS = frozenset({"changefeed_deleted", "changefeed_bucket", "valid_from", "valid_to"})


def _live(state: Any, keys: Sequence[str], columns: Sequence[tuple[str, Any]]) -> Any:
    """The model's live rows (a history: its open versions) as key columns, the number of
    rows per key and one row's values (``_MODEL``)."""
    from pyspark.sql import functions as F

    rows = state
    if _field(state.schema, "changefeed_deleted") is not None:
        rows = rows.where(~F.col("changefeed_deleted"))
    if _field(state.schema, "valid_to") is not None:
        rows = rows.where(F.col("valid_to").isNull())
    values = F.struct(*[expr.alias(name) for name, expr in columns]) if columns else F.lit(None)
    return (
        rows.select(*[F.col(f"`{k}`").alias(k) for k in keys], values.alias(_MODEL))
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias(_COPIES), F.min(_MODEL).alias(_MODEL))
    )


def _typed(source: Any, state: Any, keys: Sequence[str], columns: Sequence[tuple[str, Any]]) -> Any:
    """The source as key columns and its values (``_SOURCE``), each cast to the model's
    type of the column where the two differ (a model may cast a column)."""
    from pyspark.sql import functions as F

    model_types = state.select(*[expr.alias(n) for n, expr in columns]).schema
    key_exprs = []
    for key in keys:
        want = _field(state.schema, key).dataType
        column = F.col(f"`{key}`")
        key_exprs.append((column if source.schema[key].dataType == want
                          else column.cast(want)).alias(key))  # fmt: skip
    values = []
    for name, _ in columns:
        column = F.col("payload").getField(name)
        want = model_types[name].dataType
        have = source.schema["payload"].dataType[name].dataType
        values.append((column if have == want else column.try_cast(want)).alias(name))
    struct = F.struct(*values) if values else F.lit(None)
    return source.select(*key_exprs, struct.alias(_SOURCE), F.lit(True).alias(_IN_SOURCE))


def _join(source: Any, live: Any, keys: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    joined = source.join(live, on=list(keys), how="full_outer")
    kind = (
        F.when(F.col(_COPIES).isNull(), F.lit(MISSING))
        .when(F.col(_IN_SOURCE).isNull(), F.lit(EXTRA))
        .when(F.col(_COPIES) > 1, F.lit(DUPLICATE))
        .when(~F.col(_SOURCE).eqNullSafe(F.col(_MODEL)), F.lit(CHANGED))
        .otherwise(F.lit(EQUAL))
    )
    return joined.withColumn(_KIND, kind)


def _sums() -> list[Any]:
    from pyspark.sql import functions as F

    return [
        F.count(F.lit(1)),
        F.count(F.col(_IN_SOURCE)),
        F.coalesce(F.sum(F.col(_COPIES)), F.lit(0)),
    ]


def _feed_keys(
    backend: Any, info: Any, shards: Sequence[int], landed: Mapping[int, bytes]
) -> list[tuple[Any, ...]]:
    """The keys of the feed's events after ``landed`` (per shard the landed table's
    head: the table holds every event up to it, those after the model's position in its
    batches above ``C``; and after what retention removed, which the table holds too) up
    to the safe point, converted as a landing converts them."""
    from changefeed.client import ZERO_ULID
    from changefeed.spark.source import read_range

    horizons = backend.horizons(info, shards)
    ends = backend.safe_points(info, shards)
    converters = info.layout().converters()
    keys: list[tuple[Any, ...]] = []
    for shard in shards:
        start = max(landed.get(shard, ZERO_ULID), horizons.get(shard, ZERO_ULID))
        end = ends.get(shard, ZERO_ULID)
        if start >= end:
            continue
        for page in read_range(backend, info, shard, start, end, PAGE_SIZE):
            keys.extend(tuple(convert(v) for convert, v in zip(converters, row[2:], strict=False))
                        for row in page)  # fmt: skip
    return keys


def _in_flight(
    spark: Any,
    landed_table: str,
    batch: int,
    keys: Sequence[str],
    feed_keys: Sequence[tuple[Any, ...]],
    state: Any,
) -> Any:
    """The keys of every event after the model's position: the landed batches ``> C``
    and the feed's events read by :func:`_feed_keys`."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    landed = spark.table(landed_table).where(F.col("changefeed_batch") > batch)
    schema = T.StructType([T.StructField(k, landed.schema[k].dataType, False) for k in keys])
    frame = landed.select(*keys)
    if feed_keys:
        frame = frame.unionByName(spark.createDataFrame(list(feed_keys), schema))
    return frame.select(
        *[F.col(k).cast(_field(state.schema, k).dataType).alias(k) for k in keys]
    ).distinct()


def _differences(
    joined: Any, flying: Any, keys: Sequence[str], columns: Sequence[tuple[str, Any]], limit: int
) -> tuple[dict[str, int], tuple[Difference, ...]]:
    """The differing keys not in flight (a duplicate always counts), per kind, and the
    first ``limit`` of them by key with both sides' values."""
    from pyspark.sql import functions as F

    found = F.col(_KIND)
    real = joined.where(found == DUPLICATE).unionByName(
        joined.where((found != EQUAL) & (found != DUPLICATE)).join(flying, on=list(keys),
                                                                   how="left_anti")
    )  # fmt: skip
    counts = {str(r[0]): int(r[1]) for r in real.groupBy(_KIND).count().collect()}
    names = [name for name, _ in columns]
    listed = []
    for row in real.orderBy(*keys).limit(limit).collect() if limit else []:
        source = row[_SOURCE].asDict() if row[_SOURCE] is not None and names else None
        model = row[_MODEL].asDict() if row[_MODEL] is not None and names else None
        kind = str(row[_KIND])
        listed.append(Difference(
            kind=kind, key={k: row[k] for k in keys},
            source=source if row[_IN_SOURCE] else None,
            model=model if row[_COPIES] else None, copies=int(row[_COPIES] or 0),
        ))  # fmt: skip
    return counts, tuple(listed)
