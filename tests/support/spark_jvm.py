"""JVM options of the tests' Spark JVMs, and their class-data archive (docs/testing.md,
"JVM options").

On 2 cores the suite waits for CPU, and most of it goes to Spark JVMs, all on tiny tables.
There C2's compiler threads cost more CPU than its code saves: in the processes the tests
start (the kill scenarios' drivers, the CLI, the landing), which live seconds to a
minute, and in each worker's own session as well, whose queries are each different. And
loading, parsing and verifying Spark's, Delta's and Iceberg's classes from the jars again
is most of a fresh driver's first seconds. ``tests/conftest.py`` therefore gives every
test JVM :func:`jvm_options` through ``SPARK_SUBMIT_OPTS`` (spark-submit adds it to the
driver JVM; each child process inherits it).

``python tests/support/spark_jvm.py`` (``make test`` runs it) builds the archive: it starts
one local Spark session like the drivers' (Hive metastore, Delta Lake and Iceberg), runs
the kinds of statements they run, and the JVM writes the classes it loaded when it exits
(``-XX:ArchiveClassesAtExit``). A JVM given ``-XX:SharedArchiveFile`` maps those classes
instead of loading them. One whose classpath differs from the archive's (the PySpark 3.5
environment's), or another JDK's, cannot use it: it runs without it, but says so on
standard output, where it would mix with what a CLI test parses, so the archive comes
with ``-Xlog:cds*=off``. Benchmarks use none of this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The archive, in the virtual environment whose pyspark jars it holds.
ARCHIVE = Path(sys.prefix) / "spark-tests.jsa"
#: C1 only, and the serial collector: for every test JVM, on tiny tables. C1 alone shrinks the
#: code cache to 48 MB, which the kill scenario's first driver (hundreds of statements,
#: Spark's generated classes) filled: "Out of space in CodeCache for method handle
#: intrinsic" failed a query; so the cache keeps the size it has with C2. In a worker's
#: own session C1 alone is a few per cent slower on an idle machine but uses about 17%
#: fewer CPU-seconds, and two workers at once (the suite's case) finished 7% and 17% sooner.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
#: Spark settings for every test JVM, as Java system properties (SparkConf reads each
#: ``spark.*`` one): no generated code. On tables of tens of rows, compiling a query's
#: Java source (whole-stage code generation, then Janino) costs more than interpreting it:
#: tests/test_spark_key_order.py took 13% less time. Results are the same by Spark's
#: contract (its own suites run both modes).
SPARK_PROPERTIES = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"


def jvm_options() -> str:
    """:data:`JVM_OPTIONS` and :data:`SPARK_PROPERTIES`, with the archive when it has
    been built."""
    if ARCHIVE.is_file():
        archive = f"-XX:SharedArchiveFile={ARCHIVE} -Xlog:cds*=off"
        return f"{JVM_OPTIONS} {SPARK_PROPERTIES} {archive}"
    return f"{JVM_OPTIONS} {SPARK_PROPERTIES}"


def _workload(warehouse: Path) -> None:
    """One statement of each kind the drivers run, so that their classes are loaded; then
    the JVM is made to exit normally, which is when it writes the archive."""
    sys.path.insert(0, str(REPO / "python"))
    from changefeed.local.spark import local_spark_session

    spark = local_spark_session("changefeed-jvm-archive", warehouse_dir=warehouse, hive=True,
                                lakehouse=True)  # fmt: skip
    jvm = spark.sparkContext._gateway.proc
    spark.udf.register("cf_archive_udf", lambda v: v, "bigint")
    spark.sql("create schema w")
    spark.sql("create schema iceberg.w")
    for table, using in (("w.d", "delta"), ("iceberg.w.i", "iceberg"), ("w.p", "parquet")):
        partitioned = " partitioned by (b)" if using == "parquet" else ""
        spark.sql(f"create table {table} (k bigint, v string, b int) using {using}{partitioned}")
        spark.sql(f"insert into {table} select id, cast(id as string), 1 from range(100)")
        if using != "parquet":
            spark.sql(
                f"merge into {table} t using (select id as k, 'x' as v, 2 as b "
                "from range(50, 150)) s on t.k = s.k "
                "when matched then update set * when not matched then insert *"
            )
        spark.sql(f"select b, count(*), max(cf_archive_udf(k)) from {table} group by b").collect()
        spark.table(table).toPandas()
    spark.sql("create view w.v as select * from w.p").collect()
    spark.stop()
    # The gateway JVM exits (normally) when its stdin closes.
    jvm.stdin.close()
    jvm.wait(timeout=600)


def build(out: Path) -> None:
    """Write the archive to ``out`` (under a temporary name first: a killed build leaves
    none)."""
    out = out.resolve()  # the JVM runs in the scratch warehouse
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}"}
    warehouse = Path(tempfile.mkdtemp(prefix="cf-jvm-archive-"))
    try:
        subprocess.run(
            [sys.executable, __file__, "--workload", str(warehouse)],
            env=env, check=True, cwd=warehouse, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    if not partial.is_file():
        raise SystemExit(f"the Spark JVM wrote no class-data archive to {partial}")
    partial.rename(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload(Path(sys.argv[2]))
    else:
        build(Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE)
