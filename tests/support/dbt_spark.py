"""dbt-spark tests on Spark's catalog, Delta Lake and Iceberg: the schema macro of their
scratch projects, the Iceberg catalog as the current one, the lakehouse requirement, and
statements interrupted on their way to Spark (as a kill would cut them)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tests.support.dbt_harness import DbtError, DbtHarness
from tests.support.real_parts import unavailable

#: dbt's schema for a custom schema: the name itself (one schema per format).
SCHEMA_MACRO = """{% macro generate_schema_name(custom_schema_name, node) -%}
{{ custom_schema_name | trim if custom_schema_name else target.schema }}
{%- endmacro %}
"""


@contextlib.contextmanager
def current_catalog(spark: Any, fmt: str) -> Iterator[None]:
    """Iceberg's catalog as the current one while ``fmt`` is iceberg (see the module doc)."""
    if fmt != "iceberg":
        yield
        return
    from changefeed.local.jars import ICEBERG_CATALOG

    previous = spark.conf.get("spark.sql.defaultCatalog")
    spark.conf.set("spark.sql.defaultCatalog", ICEBERG_CATALOG)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.defaultCatalog", previous)


def require_lakehouse(spark: Any) -> Any:
    """``spark`` if it has Delta and Iceberg; else the test is unavailable (needs their jars)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if "DeltaSparkSessionExtension" not in extensions or "Iceberg" not in extensions:
        from changefeed.local.jars import LakehouseJarsMissing, lakehouse_jars

        try:
            lakehouse_jars()
        except LakehouseJarsMissing as exc:
            unavailable("Delta Lake and Iceberg", str(exc))
        unavailable("Delta Lake and Iceberg", "the shared Spark session started without them")
    return spark


@contextlib.contextmanager
def _on_sql(hook: Callable[[str], None]) -> Iterator[None]:
    """Spark's ``sql`` calls ``hook(query)`` before it runs a statement (``hook`` may raise,
    and then the statement does not run)."""
    from pyspark.sql import SparkSession

    original = SparkSession.sql

    def sql(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        hook(query)
        return original(self, query, *args, **kwargs)

    SparkSession.sql = sql  # type: ignore[method-assign]
    try:
        yield
    finally:
        SparkSession.sql = original  # type: ignore[method-assign]


@contextlib.contextmanager
def failing_at(pattern: str | None, let_through: int = 0) -> Iterator[list[str]]:
    """Spark's ``sql`` raises, without running it, on every statement matching ``pattern``
    after the first ``let_through`` of each table (the pattern's first group that matched)."""
    hit: list[str] = []
    passed: dict[str, int] = {}
    regex = re.compile(pattern or "(?!)", re.IGNORECASE | re.DOTALL)

    def fail(query: str) -> None:
        found = regex.search(query)
        if found:
            table = next((group for group in found.groups() if group), "")
            passed[table] = passed.get(table, 0) + 1
            if passed[table] > let_through:
                hit.append(query)
                raise RuntimeError("changefeed test: interrupted here")

    with _on_sql(fail):
        yield hit


@contextlib.contextmanager
def recording(pattern: str) -> Iterator[list[str]]:
    """The statements matching ``pattern`` that Spark's ``sql`` runs meanwhile."""
    seen: list[str] = []
    regex = re.compile(pattern, re.IGNORECASE)

    def record(query: str) -> None:
        if regex.search(query):
            seen.append(query)

    with _on_sql(record):
        yield seen


def run_all(
    spark: Any,
    harnesses: dict[str, DbtHarness],
    *args: str,
    fail_at: str | None = None,
    let_through: int = 0,
) -> None:
    """``dbt run *args`` in each project of ``harnesses`` (current catalog -> harness), with
    :func:`failing_at` interrupting it when ``fail_at`` is given (which must then happen)."""
    for catalog, harness in harnesses.items():
        with current_catalog(spark, catalog), failing_at(fail_at, let_through) as hit:
            try:
                harness.invoke(["run", *args], "spark")
            except DbtError:
                if not hit:
                    raise
        assert bool(hit) == bool(fail_at), f"{catalog}: the interruption point was not reached"


def fresh_projects(
    spark: Any,
    source: str,
    schemas: dict[str, str],
    root: Any,
    project: Callable[[str, Any], Any],
    catalogs: Iterable[str],
) -> dict[str, DbtHarness]:
    """Empty schemas (``source`` in Spark's catalog, ``schemas[fmt]`` in each format's
    current catalog) and one dbt harness per current catalog, on the project that
    ``project(catalog, root)`` writes."""
    require_lakehouse(spark)
    spark.sql(f"drop schema if exists spark_catalog.{source} cascade")
    spark.sql(f"create schema spark_catalog.{source}")
    for fmt, schema in schemas.items():
        with current_catalog(spark, fmt):
            spark.sql(f"drop schema if exists {schema} cascade")
            spark.sql(f"create schema {schema}")
    return {
        catalog: DbtHarness(root / f"dbt-{catalog}", spark=lambda: spark,
                            project_dir=project(catalog, root))
        for catalog in catalogs
    }  # fmt: skip
