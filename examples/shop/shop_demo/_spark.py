"""The Spark side of the demo: a local session with a persistent metastore, and small
queries for the progress lines (the landing: _landing.py)."""

from __future__ import annotations

import os
from typing import Any

from shop_demo._errors import DemoError
from shop_demo._layout import DemoLayout


def start_spark(layout: DemoLayout) -> Any:
    """A ``local[2]`` session whose Derby metastore and tables live in the state dir.

    Safe to call from a background thread: it changes no working directory, only the
    file descriptors the JVM inherits while it is launched.
    """
    from changefeed.local.spark import JavaNotFound, jvm_output_to, local_spark_session

    layout.warehouse_dir.mkdir(parents=True, exist_ok=True)
    layout.log_dir.mkdir(parents=True, exist_ok=True)
    # Derby writes derby.log into the JVM's working directory unless told otherwise.
    derby_log = f"-Dderby.stream.error.file={layout.log_dir / 'derby.log'}"
    previous = os.environ.get("JDK_JAVA_OPTIONS")
    os.environ["JDK_JAVA_OPTIONS"] = f"{previous} {derby_log}" if previous else derby_log
    try:
        with jvm_output_to(layout.log_dir / "spark.log"):
            spark = local_spark_session(
                app_name="changefeed-demo", warehouse_dir=layout.warehouse_dir, hive=True
            )
    except JavaNotFound as exc:
        raise DemoError(str(exc)) from None
    finally:
        if previous is None:
            os.environ.pop("JDK_JAVA_OPTIONS", None)
        else:
            os.environ["JDK_JAVA_OPTIONS"] = previous
    spark.sparkContext.setLogLevel("FATAL")
    # The first catalog call creates the Derby metastore (slow once, on a fresh state).
    for schema in ("shop_landing", "shop_analytics"):
        spark.sql(f"create database if not exists {schema}")
    return spark


def table_exists(spark: Any, name: str) -> bool:
    return bool(spark.catalog.tableExists(name))


def feed_totals(spark: Any, table: str) -> tuple[int, int]:
    """(events, last batch) of a landed feed; (0, 0) before its first landing."""
    if not table_exists(spark, table):
        return 0, 0
    spark.sql(f"refresh table {table}")
    row = spark.sql(f"select count(*), coalesce(max(changefeed_batch), 0) from {table}").collect()
    return int(row[0][0]), int(row[0][1])


def consumed_totals(spark: Any) -> dict[str, int]:
    """Events each consumer model has consumed so far (feed id -> events)."""
    totals = {"shop.orders": 0, "shop.payments": 0}
    if table_exists(spark, "shop_analytics.order_updates"):
        spark.sql("refresh table shop_analytics.order_updates")
        row = spark.sql("select coalesce(sum(events), 0) from shop_analytics.order_updates")
        totals["shop.orders"] = int(row.collect()[0][0])
    if table_exists(spark, "shop_analytics.payments_hourly"):
        spark.sql("refresh table shop_analytics.payments_hourly")
        row = spark.sql("select coalesce(sum(payments), 0) from shop_analytics.payments_hourly")
        totals["shop.payments"] = int(row.collect()[0][0])
    return totals
