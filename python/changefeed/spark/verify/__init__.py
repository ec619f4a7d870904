"""Prove that a current-state model equals its source table: ``verify`` compares every
row of the feed's source table, read now, with the model's live rows, and tells the
differences from the keys in flight (written after the model's position, which its next
``dbt run`` applies). What ``changefeed verify`` runs; docs/spark.md "Verifying a state
model", docs/protocol.md section 13.

>>> from changefeed.spark.verify import verify                       # doctest: +SKIP
>>> result = verify(spark, {"connection": "postgresql://app@db/shop",  # doctest: +SKIP
...                         "feed": "shop.orders"},
...                 "analytics.orders_state", "landing.orders_feed")
>>> result.ok, result.equal, result.in_flight                        # doctest: +SKIP
(True, 1204, 2)
"""

from __future__ import annotations

from changefeed.spark.verify._verify import (
    BARRIER_TIMEOUT,
    KINDS,
    MAX_KEYS,
    Difference,
    VerifyError,
    VerifyResult,
    verify,
)

__all__ = [
    "BARRIER_TIMEOUT",
    "KINDS",
    "MAX_KEYS",
    "Difference",
    "VerifyError",
    "VerifyResult",
    "verify",
]
