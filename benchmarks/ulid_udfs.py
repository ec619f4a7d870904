"""Benchmark of the ULID Spark UDFs against the alternatives, in one run on the same data.

For encode (binary(16) -> string), decode (string -> binary(16)) and timestamp it times,
on one cached DataFrame of ``--rows`` random ULIDs in a local Spark session:

* ``row UDF``: python-ulid one value at a time in a plain Python UDF, with Arrow-batched
  rows (``useArrow=True``, the default since Spark 4.1:
  ``spark.sql.execution.pythonUDF.arrow.enabled``) and with pickled rows (the default
  before);
* ``Arrow UDF``: ``changefeed.spark.udfs`` (``pa.Array -> pa.Array``), what ``register`` uses;
* ``Arrow iterator UDF`` and ``pandas UDF``: the same kernel in the other UDF flavours,
  to show why the package uses plain Arrow UDFs;
* ``SQL macro``: the pure Spark SQL expression of the dbt macro (rendered by dbt);
* ``identity Arrow UDF``: returns its input, i.e. only moves the bytes JVM -> Python ->
  JVM; no Python UDF can beat it, so it is the floor of the cost of any UDF.

Each case is ``select <expr> ... write.format("noop")``: every row is computed, nothing is
written. Cases run interleaved, best of ``--repeat``, so that load from other processes
hits them alike. Besides wall time it records the CPU time of the Spark JVM, its Python
workers and this process (from /proc), which other load on the machine barely changes:
on a busy machine compare the CPU columns.

Prints a markdown table and whether encode and decode meet the bars: the Arrow UDF at
least 2.5x the SQL macro and 8x the faster python-ulid row UDF, next to the
most any Python UDF could reach (the identity UDF's ratio). ``--write-docs`` puts it all
into the "ULID UDFs" section of docs/performance.md; ``--check`` exits 1 if a bar is
missed. Usage::

    .venv/bin/python benchmarks/ulid_udfs.py [--rows 2000000] [--repeat 3] [--batch 10000]
        [--write-docs] [--check]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from _perfdoc import write_section
from _scratch import scratch_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/support/dbt_harness.py renders the macros

from changefeed.local.spark import local_spark_session  # noqa: E402
from changefeed.spark.udfs import make_udf  # noqa: E402
from changefeed.ulid import decode_valid, encode  # noqa: E402
from changefeed.ulid.arrow import rows, to_binary_array, to_string_array  # noqa: E402

DOC = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN ulid-udfs (written by benchmarks/ulid_udfs.py) -->"
END = "<!-- END ulid-udfs -->"
BARS = {"vs SQL macro": 2.5, "vs row UDF": 8.0}
NOTE = (
    "When the load average is above the number of cores, wall times also measure the other "
    "processes: compare the CPU columns (CPU seconds of the Spark JVM and its Python workers). "
    "What the numbers mean and why the UDFs are Arrow UDFs: "
    "[spark-udfs.md](spark-udfs.md#which-udf-flavour-and-why)."
)


@dataclass
class Case:
    operation: str
    name: str
    column: Any
    role: str = ""  # "ours", "sql", "row" or "floor": what the ratios and bars use
    repeat: int | None = None  # None: --repeat
    best: float = float("inf")  # wall seconds
    best_cpu: float = float("inf")  # CPU seconds of the JVM, the Python workers and us


def _cpu_seconds(roots: list[int]) -> float:
    """CPU time used so far by ``roots`` and all their descendants (Linux /proc).

    Counts each process's own time plus its reaped children's (cutime/cstime), so a
    Python worker that exits is still counted once, through its parent.
    """
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total, stack, seen = 0, list(roots), set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += times.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / tick


def _pandas_udfs() -> tuple[Any, Any]:
    """The same kernels as pandas UDFs (Series of Python bytes/str in and out)."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def pandas_encode(values: pd.Series) -> pd.Series:
        raw, valid = rows(pa.array(values, pa.binary()), 16)
        return to_string_array(encode(raw), valid).to_pandas()

    @pandas_udf("binary")
    def pandas_decode(values: pd.Series) -> pd.Series:
        text, present = rows(pa.array(values, pa.string()), 26)
        raw, valid = decode_valid(text)
        return to_binary_array(raw, present & valid).to_pandas()

    return pandas_encode, pandas_decode


def _row_udfs(use_arrow: bool) -> tuple[Any, Any, Any]:
    from pyspark.sql.functions import udf
    from ulid import ULID

    def to_string(value: bytes | None) -> str | None:
        return None if value is None or len(value) != 16 else str(ULID.from_bytes(bytes(value)))

    def from_string(value: str | None) -> bytes | None:
        try:
            return None if value is None else bytes(ULID.from_str(value).bytes)
        except ValueError:
            return None

    def timestamp_ms(value: bytes | None) -> int | None:
        return None if value is None or len(value) != 16 else ULID.from_bytes(value).milliseconds

    return (
        udf(to_string, "string", useArrow=use_arrow),
        udf(from_string, "binary", useArrow=use_arrow),
        udf(timestamp_ms, "bigint", useArrow=use_arrow),
    )


def _identity_udfs() -> tuple[Any, Any]:
    from pyspark.sql.functions import arrow_udf

    @arrow_udf("binary")
    def identity_binary(values: pa.Array) -> pa.Array:
        return values

    @arrow_udf("string")
    def identity_string(values: pa.Array) -> pa.Array:
        return values

    return identity_binary, identity_string


def _sql_expressions(spark: Any) -> dict[str, str]:
    from tests.support.dbt_harness import DbtHarness, call

    harness = DbtHarness(scratch_dir("cf-bench-dbt-"), spark=lambda: spark)
    macros = {
        "encode": ("ulid_to_string", "u"),
        "decode": ("ulid_from_string", "s"),
        "timestamp": ("ulid_timestamp", "u"),
    }
    rendered = harness.render_many([call(m, arg) for m, arg in macros.values()], "spark")
    return dict(zip(macros, rendered, strict=True))


def cases(spark: Any, row_repeat: int) -> list[Case]:
    from pyspark.sql import functions as F

    sql = _sql_expressions(spark)
    pandas_udfs = dict(zip(("encode", "decode"), _pandas_udfs(), strict=True))
    row_arrow = dict(zip(("encode", "decode", "timestamp"), _row_udfs(True), strict=True))
    row_pickled = dict(zip(("encode", "decode", "timestamp"), _row_udfs(False), strict=True))
    identity = dict(zip(("encode", "decode"), _identity_udfs(), strict=True))
    ours = {"encode": "ulid_to_string", "decode": "ulid_from_string", "timestamp": "ulid_timestamp"}
    out: list[Case] = []
    for operation, name in ours.items():
        arg = "s" if operation == "decode" else "u"
        out += [
            Case(operation, "python-ulid row UDF, Arrow-batched (default)",
                 row_arrow[operation](arg), "row", row_repeat),
            Case(operation, "python-ulid row UDF, pickled (`useArrow=False`)",
                 row_pickled[operation](arg), "row", row_repeat),
        ]  # fmt: skip
        if operation in pandas_udfs:
            out += [
                Case(operation, "pandas UDF, same kernel", pandas_udfs[operation](arg)),
                Case(operation, "Arrow iterator UDF", make_udf(name, iterator=True)(arg)),
            ]
        out += [
            Case(operation, "**Arrow UDF (changefeed.spark.udfs)**", make_udf(name)(arg), "ours"),
            Case(operation, f"SQL macro `{name}`", F.expr(sql[operation]), "sql"),
        ]
        if operation in identity:
            out.append(Case(operation, "identity Arrow UDF (floor)", identity[operation](arg),
                            "floor"))  # fmt: skip
    return out


def run(spark: Any, data: Any, all_cases: list[Case], repeat: int) -> None:
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    roots = sorted({jvm, os.getpid()})

    def once(case: Case) -> None:
        cpu = _cpu_seconds(roots)
        start = time.perf_counter()
        data.select(case.column.alias("x")).write.format("noop").mode("overwrite").save()
        case.best = min(case.best, time.perf_counter() - start)
        case.best_cpu = min(case.best_cpu, _cpu_seconds(roots) - cpu)

    for case in all_cases:  # warm-up: start Python workers, JIT the generated code
        if case.role != "row":
            once(case)
    for round_ in range(repeat):
        for case in all_cases:
            if round_ < (case.repeat or repeat):
                once(case)
        print(f"round {round_ + 1}/{repeat} done", file=sys.stderr, flush=True)


def table(all_cases: list[Case], n: int) -> tuple[str, list[str]]:
    """The markdown table and the bar verdicts, on wall time and on CPU time."""
    lines = [
        "| operation | implementation | M rows/s | M rows/CPU-s "
        "| Arrow UDF is x faster (wall) | (CPU) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    verdicts: list[str] = []
    for operation in dict.fromkeys(c.operation for c in all_cases):
        group = [c for c in all_cases if c.operation == operation]
        ours = next(c for c in group if c.role == "ours")
        for case in group:
            rate, cpu_rate = n / case.best / 1e6, n / case.best_cpu / 1e6
            wall = "" if case is ours else f"{case.best / ours.best:.1f}"
            cpu = "" if case is ours else f"{case.best_cpu / ours.best_cpu:.1f}"
            lines.append(
                f"| {operation} | {case.name} | {rate:.2f} | {cpu_rate:.2f} | {wall} | {cpu} |"
            )
        if operation == "timestamp":
            continue
        sql = next(c for c in group if c.role == "sql")
        row = min((c for c in group if c.role == "row"), key=lambda c: c.best)
        floor = next(c for c in group if c.role == "floor")
        for label, other in (("vs SQL macro", sql), ("vs row UDF", row)):
            wall_ratio, cpu_ratio = other.best / ours.best, other.best_cpu / ours.best_cpu
            ok = "meets" if wall_ratio >= BARS[label] else "MISSES"
            verdicts.append(
                f"{operation}: Arrow UDF {wall_ratio:.1f}x {label} on wall time ({ok} the"
                f" ≥ {BARS[label]:g}x bar), {cpu_ratio:.1f}x on CPU time; the identity UDF,"
                f" the most any Python UDF can reach, is {other.best / floor.best:.1f}x"
                f" / {other.best_cpu / floor.best_cpu:.1f}x"
            )
    return "\n".join(lines), verdicts



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--row-udf-repeat", type=int, default=None, help="runs of the slow row UDFs (--repeat)"
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="spark.sql.execution.arrow.maxRecordsPerBatch"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a bar is missed")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    spark = local_spark_session("changefeed-bench-ulid-udfs")
    if args.batch:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.batch))
    row_repeat = args.row_udf_repeat or args.repeat
    # Random 16-byte values: every one is a valid ULID, any timestamp up to year 10889.
    data = (
        spark.range(args.rows, numPartitions=2)
        .select(F.expr("substring(unhex(sha2(cast(id as string), 256)), 1, 16)").alias("u"))
        .select("u", make_udf("ulid_to_string")("u").alias("s"))
        .cache()
    )
    data.count()
    all_cases = cases(spark, row_repeat)
    load_before = os.getloadavg()[0]
    run(spark, data, all_cases, args.repeat)
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    markdown, verdicts = table(all_cases, args.rows)
    batch = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    setup = (
        f"{args.rows:,} random ULIDs cached in a local[2] Spark {spark.version} session "
        f"(Python {platform.python_version()}, pyarrow {pa.__version__}, "
        f"{os.cpu_count()} cores, Arrow batches of {batch} rows); best of {args.repeat} "
        f'(row UDFs: {row_repeat}), `write.format("noop")`, {load}.'
    )
    section = "\n".join(
        [
            "## ULID UDFs",
            "",
            "Measured by `make bench` (`benchmarks/ulid_udfs.py`) on " + setup,
            "",
            NOTE,
            "",
            markdown,
            "",
            *[f"- {v}" for v in verdicts],
        ]
    )
    print(section)
    if args.write_docs:
        write_section(DOC, BEGIN, END, section)
        print(f"\nwritten to {DOC.relative_to(REPO)}", file=sys.stderr)
    spark.stop()
    return 1 if args.check and any("MISSES" in v for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
