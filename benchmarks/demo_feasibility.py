"""What the demo's feasibility probe costs on a finished calibration.

    python benchmarks/demo_feasibility.py CALIBRATION_DIR [--seeds 2] [--requests 200]

Derives the demo's setting from ``CALIBRATION_DIR/costtable.json`` (as ``servecal
demo`` does on a CPU), then times ``feasible_setting``: the smallest fixed chunk
simulated at each workload's search floor for every seed, the targets lifted where
it misses 90%. Prints the seconds and the derived and the kept targets.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from servecal.costmodels import CostTable
from servecal.reports.demo.setting import Axes, derive_setting, token_scale
from servecal.reports.demo.simulation import feasible_setting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibration", type=Path)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    cal = args.calibration
    table = CostTable.load(cal / "costtable.json")
    grid = table.axes
    axes = Axes(tuple(grid["n_decode"]), max(grid["chunk"]), tuple(grid["ctx"]))
    setting = derive_setting(table, axes, token_scale(on_gpu=False))
    start = time.perf_counter()
    kept = feasible_setting(
        setting, args.seeds, args.requests, cal / "costtable.json", cal / "samples.parquet"
    )
    seconds = time.perf_counter() - start
    derived = " / ".join(f"{d:.3g}" for d in setting.tpot_targets_ms)
    used = " / ".join(f"{d:.3g}" for d in kept.tpot_targets_ms)
    print(f"feasibility probe: {seconds:.1f} s; derived targets {derived} ms, used {used} ms")


if __name__ == "__main__":
    main()
