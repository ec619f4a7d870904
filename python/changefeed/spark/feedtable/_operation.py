"""The operation column of a landed feed (docs/protocol.md 11.1): what the feed knows of
each event's change, written by the landing beside the event.

A feed event is a key that changed and, with a payload, the key's row as the landing read
it (its row image, or the source's row). That says whether the row exists after the
change, and a snapshot's rows are known as such when they are landed, but not whether
the key existed before: an insert and an update are the same event. So a landed event is

* ``snapshot``: a row a snapshot read (protocol 12);
* ``delete``: a live event whose row does not exist (payload null);
* ``upsert``: a live event whose row exists, inserted or updated;
* null: a feed landed without payload, which records keys only.

The state models tell an insert from an update against the versions before the event
(docs/spark.md, "The operation column").
"""

from __future__ import annotations

from typing import Any, Final

OPERATION_COLUMN: Final = "changefeed_operation"
UPSERT: Final = "upsert"
DELETE: Final = "delete"
SNAPSHOT: Final = "snapshot"
#: The values a landing writes (besides null, for a feed landed without payload).
LANDED_OPERATIONS: Final = (UPSERT, DELETE, SNAPSHOT)

_PAYLOAD: Final = "payload"


def with_operation(frame: Any, snapshot: bool) -> Any:
    """``frame`` (events in the landed schema, without ``changefeed_batch``) with the
    operation column appended."""
    from pyspark.sql import functions as F

    if snapshot:
        value = F.lit(SNAPSHOT)
    elif _PAYLOAD in frame.columns:
        value = F.when(F.col(_PAYLOAD).isNull(), F.lit(DELETE)).otherwise(F.lit(UPSERT))
    else:
        value = F.lit(None).cast("string")
    return frame.withColumn(OPERATION_COLUMN, value)


def with_operation_arrow(events: Any, snapshot: bool) -> Any:
    """The same for an Arrow table or record batch (the files a landing writes itself)."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    rows = events.num_rows
    if snapshot:
        value = pa.array([SNAPSHOT] * rows, type=pa.string())
    elif _PAYLOAD in events.schema.names:
        missing = pc.is_null(events.column(_PAYLOAD))
        value = pc.if_else(missing, pa.scalar(DELETE), pa.scalar(UPSERT))
    else:
        value = pa.nulls(rows, type=pa.string())
    if isinstance(events, pa.RecordBatch):
        columns = [*events.columns, value]
        return pa.RecordBatch.from_arrays(columns, schema=events.schema.append(_field()))
    return events.append_column(_field(), value)


def _field() -> Any:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    return pa.field(OPERATION_COLUMN, pa.string(), nullable=True)
