"""The Delta Lake and Iceberg jars of the local Spark session, and the settings that enable them.

``make jars`` fetches them with Maven from ``jars/pom.xml`` into ``<repo>/.jars``; the
environment variable ``CHANGEFEED_JARS`` points elsewhere (e.g. a directory filled by
your own build from the same pom). pyspark ships Spark but neither table format, and the
jars must match its Spark minor, which is why they come from the project's pom and not
from ``spark.jars.packages`` (resolved at session start, and needing the network then).
"""

from __future__ import annotations

import os
from pathlib import Path

from changefeed.errors import ChangefeedError

ENV_VAR = "CHANGEFEED_JARS"
DEFAULT_DIR = Path(__file__).resolve().parents[3] / ".jars"

#: The jars each format needs, by file-name prefix (the versions are the pom's).
REQUIRED = {
    "Delta Lake": ("delta-spark_", "delta-storage-"),
    "Iceberg": ("iceberg-spark-runtime-",),
}

#: The Spark minor that jars/pom.xml's artifacts are built for (delta-spark_4.1_2.13,
#: iceberg-spark-runtime-4.1_2.13); on another Spark their classes fail to link.
SPARK_MINOR = "4.1"

#: The Iceberg catalog of the local session. Spark's own catalog (``spark_catalog``) is
#: Delta's, so parquet and delta tables share it; iceberg tables live in this one.
ICEBERG_CATALOG = "iceberg"


class LakehouseJarsMissing(ChangefeedError, RuntimeError):
    """The Delta Lake or Iceberg jars are not in the jars directory, or not for this Spark."""


def jars_dir() -> Path:
    return Path(os.environ.get(ENV_VAR) or DEFAULT_DIR)


def lakehouse_jars(spark_version: str | None = None) -> list[Path]:
    """The jar files to put on ``spark.jars``; raises naming the fix if one is missing or
    if ``spark_version`` (default: pyspark's) is not the Spark minor they are built for."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    if spark_version.split(".")[:2] != SPARK_MINOR.split("."):
        raise LakehouseJarsMissing(
            f"the Delta Lake and Iceberg jars of jars/pom.xml are built for Spark {SPARK_MINOR}, "
            f"and pyspark is {spark_version}; install pyspark {SPARK_MINOR}.x "
            f"(pip install 'pyspark=={SPARK_MINOR}.*')"
        )
    where = jars_dir()
    jars = sorted(where.glob("*.jar")) if where.is_dir() else []
    names = [jar.name for jar in jars]
    missing = [
        f"{fmt} ({prefix}*.jar)"
        for fmt, prefixes in REQUIRED.items()
        for prefix in prefixes
        if not any(name.startswith(prefix) for name in names)
    ]
    if missing:
        raise LakehouseJarsMissing(
            f"the jars of {', '.join(missing)} are not in {where}; run `make jars` (Maven "
            f"fetches them from jars/pom.xml), or set {ENV_VAR} to a directory holding them"
        )
    return jars


def lakehouse_conf(jars: list[Path], warehouse: str | Path) -> dict[str, str]:
    """Spark settings for parquet, delta and iceberg tables side by side in one session;
    ``warehouse`` is a local directory or a URI (``s3a://bucket/path``)."""
    return {
        "spark.jars": ",".join(str(jar) for jar in jars),
        "spark.sql.extensions": ",".join(
            (
                "io.delta.sql.DeltaSparkSessionExtension",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            )
        ),
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta rebuilds a table's snapshot from its log in 50 tasks by default, sized for
        # clusters; on a local[2] session that dominates every small write.
        "spark.databricks.delta.snapshotPartitions": "2",
        f"spark.sql.catalog.{ICEBERG_CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{ICEBERG_CATALOG}.type": "hadoop",
        # A string join, not a Path's: Path would fold s3a:// into s3a:/.
        f"spark.sql.catalog.{ICEBERG_CATALOG}.warehouse": f"{str(warehouse).rstrip('/')}/iceberg",
    }


def postgresql_driver() -> Path:
    """PostgreSQL's JDBC driver (jars/pom.xml), which the shared catalog's metastore uses;
    raises naming the fix if it is not in the jars directory."""
    return _one_jar("postgresql-*.jar", "PostgreSQL's JDBC driver", "jars/pom.xml", "it")


def s3a_connector() -> Path:
    """Hadoop's S3A connector (jars/s3a/pom.xml), which ``s3a://`` locations need; raises
    naming the fix if it is not in the jars directory."""
    return _one_jar(
        "hadoop-aws-*.jar",
        "Hadoop's S3A connector for s3a:// locations",
        "jars/s3a/pom.xml",
        "it and the AWS SDK modules of that pom",
    )


def _one_jar(pattern: str, what: str, pom: str, holding: str) -> Path:
    where = jars_dir()
    found = sorted(where.glob(pattern)) if where.is_dir() else []
    if not found:
        raise LakehouseJarsMissing(
            f"{what} ({pattern}) is not in {where}; run `make jars` (Maven fetches it from "
            f"{pom}), or set {ENV_VAR} to a directory holding {holding}"
        )
    return found[-1]
