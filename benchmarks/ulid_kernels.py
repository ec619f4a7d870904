"""Micro-benchmark of the numpy ULID kernels against python-ulid's per-value codec.

Prints a markdown table of million rows per second (best of ``--repeat`` runs; numpy
runs these element-wise kernels on one core) and exits 1 if encode or decode misses its bar. Usage::

    .venv/bin/python benchmarks/ulid_kernels.py [--rows 1000000] [--repeat 7]

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--oracle-rows", type=int, default=100_000)
    args = parser.parse_args()

    n = args.rows
    raw = np.random.default_rng(0).integers(0, 256, (n, 16), dtype=np.uint8)
    text = cu.encode(raw)
    uuid_text = cu.to_uuid(raw)
    high, low = cu.to_parts(raw)
    assert (cu.decode(text) == raw).all()

    kernels: dict[str, Callable[[], object]] = {
        "encode": lambda: cu.encode(raw),
        "decode": lambda: cu.decode(text),
        "decode_valid": lambda: cu.decode_valid(text),
        "from_parts": lambda: cu.from_parts(high, low),
        "to_parts": lambda: cu.to_parts(raw),
        "order_keys": lambda: cu.order_keys(raw),
        "to_uuid": lambda: cu.to_uuid(raw),
        "from_uuid": lambda: cu.from_uuid(uuid_text),
        "timestamp_ms": lambda: cu.timestamp_ms(raw),
        "generate": lambda: cu.generate(n),
    }
    m = min(n, args.oracle_rows)
    values = [row.tobytes() for row in raw[:m]]
    strings = [row.tobytes().decode("ascii") for row in text[:m]]
    oracle: dict[str, Callable[[], object]] = {
        "encode": lambda: [str(ULID.from_bytes(b)) for b in values],
        "decode": lambda: [ULID.from_str(s).bytes for s in strings],
    }

    print(
        f"{n:,} rows, best of {args.repeat}; numpy {np.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}"
    )
    print()
    print("| kernel | M rows/s | python-ulid M rows/s | speed-up | bar |")
    print("|---|---:|---:|---:|---|")
    missed = []
    for name, run in kernels.items():
        rate = n / best_seconds(run, args.repeat) / 1e6
        cells = ["", "", ""]
        if name in oracle:
            oracle_rate = m / best_seconds(oracle[name], max(1, args.repeat // 3)) / 1e6
            cells[:2] = [f"{oracle_rate:.2f}", f"{rate / oracle_rate:.0f}x"]
        if name in BARS:
            ok = rate >= BARS[name]
            cells[2] = f"{'ok' if ok else 'MISSED'} (>= {BARS[name]:g})"
            if not ok:
                missed.append(name)
        print(f"| {name} | {rate:.1f} | " + " | ".join(cells) + " |")
    if missed:
        print(f"\nbelow the bar: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
