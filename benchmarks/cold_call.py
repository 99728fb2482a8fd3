"""What one compiled call costs out of the CPU's caches (as right after a scheduler's step).

Before every timed call the caches are flushed by a pass over 32 MB of numpy data
and 20,000 Python objects; the median µs of each call over ``--calls`` rounds:

* numba functions that do nothing, with 5 numbers, with one array and 5 numbers,
  with four arrays and 8 numbers, and the one-array function's compiled code called
  past numba's dispatcher (``interp.entry_point``);
* ``CostTable.max_chunk`` and ``predict`` on the fitted A100 table, and with
  ``--baseline REV`` the same at git revision ``REV`` (in this process).

    python benchmarks/cold_call.py [--calls 400] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit

from servecal.costmodels.interp import entry_point
from servecal.costmodels.table import CostTable

sys.path.insert(0, str(Path(__file__).parent))
from revision import package_at  # noqa: E402

A100 = Path(__file__).resolve().parents[1] / "sched" / "data" / "device_a100_fitted.json"


@njit("i8(f8, f8, f8, f8, i8)", cache=True)
def numbers(n, ctx, prefix, budget, limit):  # noqa: ANN001, ANN201
    return limit


@njit("i8(f8[::1], f8, f8, f8, f8, i8)", cache=True)
def one_array(state, n, ctx, prefix, budget, limit):  # noqa: ANN001, ANN201
    return limit


@njit("i8(f8[::1], f8[::1], f8[::1], i8[::1], f8, f8, f8, f8, f8, i8, i8, b1)", cache=True)
def four_arrays(a, b, c, d, rho, n, ctx, prefix, budget, limit, g, rises):  # noqa: ANN001, ANN201
    return limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--baseline", default=None)
    args = parser.parse_args()
    big = np.ones(4_000_000)
    objects = [{"a": i} for i in range(100_000)]

    def flush() -> None:
        big.sum()
        sum(d["a"] for d in objects[::5])

    x, y, z, counts = np.zeros(30_000), np.zeros(30_000), np.zeros(40), np.zeros(5, np.int64)
    direct = entry_point(one_array)
    tables = {"this tree": CostTable.load(A100)}
    if args.baseline:
        package = package_at(args.baseline, Path(tempfile.mkdtemp()))
        module = importlib.import_module(f"{package}.costmodels.table")
        tables[args.baseline] = module.CostTable.load(A100)
    cases = {
        "a Python function that does nothing": lambda s: None,
        "numba, 5 numbers": lambda s: numbers(256, 2345.6 + s, 300, 28.0, 2048),
        "numba, 1 array + 5 numbers": lambda s: one_array(x, 256, 2345.6 + s, 300, 28.0, 2048),
        "numba, 4 arrays + 8 numbers": lambda s: four_arrays(
            x, y, z, counts, 0.1, 256, 2345.6 + s, 300, 28.0, 2048, 0, True
        ),
        "the same 1 array + 5, past the dispatcher": lambda s: direct(
            x, 256, 2345.6 + s, 300, 28.0, 2048
        ),
    }
    for name, t in tables.items():
        cases[f"max_chunk at {name}"] = lambda s, t=t: t.max_chunk(
            256, 2345.6 + s, (s * 1500) % 12_000, 28.0, 2048, 0.99, True
        )
        cases[f"predict at {name}"] = lambda s, t=t: t.predict(
            256, 700, 2345.6 + s, (s * 1500) % 12_000, 0.99
        )
    for call in cases.values():
        call(0)
    times: dict[str, list[int]] = {name: [] for name in cases}
    for step in range(args.calls):
        for name, call in cases.items():
            flush()
            t0 = time.perf_counter_ns()
            call(step)
            times[name].append(time.perf_counter_ns() - t0)
    print(f"median µs per call out of the caches, {args.calls} calls each")
    for name, ns in times.items():
        print(f"  {name:44s} {statistics.median(ns) / 1000:7.2f}")


if __name__ == "__main__":
    main()
