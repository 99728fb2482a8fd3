"""What interleaving points costs a timed iteration: cold caches after another point.

``servecal calibrate`` interleaves the repeats of a block of points (on CPU, 32),
so each timed iteration follows *another* point's iteration, while online an
iteration follows one much like it. For a few decode points this times, in pairs
within one loop (so the host's slow drifts cancel), the point right after its own
previous iteration ("warm") and right after a large other point ("cold"), and
prints the median of the paired ratios cold / warm.

    python benchmarks/interleave_cost.py [--pairs 300] [--layout paged|contiguous]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import ContiguousLayout
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock
from servecal.sched.torch_executor.calibration import PagedLayout

POINTS = [Point(1, 0, 450, 0), Point(4, 0, 450, 0), Point(16, 0, 512, 0)]
#: Points of the default tiny grid that run between two repeats of one point.
OTHERS = [Point(24, 0, 2048, 0), Point(8, 256, 512, 1024), Point(16, 0, 2048, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--layout", choices=("paged", "contiguous"), default="paged")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = build_model(ModelShape.from_name("tiny"))
    # no group changes here: only the cache state differs between the two timings
    layout = PagedLayout(change_every=10**9) if args.layout == "paged" else ContiguousLayout()
    clock = CpuClock()
    others = [layout.prepare(model, p) for p in OTHERS]
    for point in POINTS:
        prepared = layout.prepare(model, point)
        warm, cold = [], []
        for i in range(args.pairs):
            prepared.time(clock)
            warm.append(sum(prepared.time(clock)))
            others[i % len(others)].time(clock)
            cold.append(sum(prepared.time(clock)))
        ratio = np.median(np.array(cold) / np.array(warm))
        print(
            f"{args.layout} {point.label()}: warm {np.median(warm):.2f} ms, "
            f"cold {np.median(cold):.2f} ms, paired cold / warm {ratio:.3f}"
        )


if __name__ == "__main__":
    main()
