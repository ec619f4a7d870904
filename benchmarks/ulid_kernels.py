"""Micro-benchmark of the numpy ULID kernels against python-ulid's per-value codec.

Prints a markdown table of million rows per second (best of ``--repeat`` runs; numpy
runs these element-wise kernels on one core), for one ``--rows`` batch and for the same
rows in ``--batch``-row calls, and exits 1 if encode or decode misses its bar. Usage::

    .venv/bin/python benchmarks/ulid_kernels.py [--rows 1000000] [--batch 10000] [--repeat 7]

python-ulid is timed on the first ``--oracle-rows`` rows of the same data, one value at a
time through its public API (``str(ULID.from_bytes(b))``, ``ULID.from_str(s).bytes``).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from ulid import ULID

from changefeed import ulid as cu

BARS = {"encode": 20.0, "decode": 15.0}
"""Required million rows per second for 1 M-row batches."""


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    run()  # warm the tables and the allocator
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


class Data:
    """One data set in every representation the kernels take."""

    def __init__(self, raw: NDArray[np.uint8]) -> None:
        self.n = len(raw)
        self.raw = raw
        self.text = cu.encode(raw)
        self.uuid_text = cu.to_uuid(raw)
        self.high, self.low = cu.to_parts(raw)

    def kernels(self) -> dict[str, Callable[[], object]]:
        return {
            "encode": lambda: cu.encode(self.raw),
            "decode": lambda: cu.decode(self.text),
            "decode_valid": lambda: cu.decode_valid(self.text),
            "from_parts": lambda: cu.from_parts(self.high, self.low),
            "to_parts": lambda: cu.to_parts(self.raw),
            "order_keys": lambda: cu.order_keys(self.raw),
            "to_uuid": lambda: cu.to_uuid(self.raw),
            "from_uuid": lambda: cu.from_uuid(self.uuid_text),
            "timestamp_ms": lambda: cu.timestamp_ms(self.raw),
            "generate": lambda: cu.generate(self.n),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000, help="small-batch column size")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--oracle-rows", type=int, default=100_000)
    args = parser.parse_args()

    n = args.rows
    raw = np.random.default_rng(0).integers(0, 256, (n, 16), dtype=np.uint8)
    data = Data(raw)
    assert (cu.decode(data.text) == raw).all()
    # Spark hands UDFs Arrow batches of ~10k rows, one call each.
    batch = Data(raw[: args.batch])
    batch_calls = max(1, n // args.batch)

    m = min(n, args.oracle_rows)
    values = [row.tobytes() for row in raw[:m]]
    strings = [row.tobytes().decode("ascii") for row in data.text[:m]]
    oracle: dict[str, Callable[[], object]] = {
        "encode": lambda: [str(ULID.from_bytes(b)) for b in values],
        "decode": lambda: [ULID.from_str(s).bytes for s in strings],
    }

    print(
        f"{n:,} rows, best of {args.repeat}; numpy {np.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}"
    )
    print()
    print(
        f"| kernel | M rows/s | M rows/s in {args.batch:,}-row calls "
        "| python-ulid M rows/s | speed-up | bar |"
    )
    print("|---|---:|---:|---:|---:|---|")
    missed = []
    small_kernels = batch.kernels()
    for name, run in data.kernels().items():
        rate = n / best_seconds(run, args.repeat) / 1e6
        small = small_kernels[name]

        def many(small: Callable[[], object] = small) -> None:
            for _ in range(batch_calls):
                small()

        batch_rate = batch_calls * batch.n / best_seconds(many, args.repeat) / 1e6
        cells = ["", "", ""]
        if name in oracle:
            oracle_rate = m / best_seconds(oracle[name], max(1, args.repeat // 3)) / 1e6
            cells[:2] = [f"{oracle_rate:.2f}", f"{rate / oracle_rate:.0f}x"]
        if name in BARS:
            ok = rate >= BARS[name]
            cells[2] = f"{'ok' if ok else 'MISSED'} (>= {BARS[name]:g})"
            if not ok:
                missed.append(name)
        print(f"| {name} | {rate:.1f} | {batch_rate:.1f} | " + " | ".join(cells) + " |")
    if missed:
        print(f"\nbelow the bar: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
