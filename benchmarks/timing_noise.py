"""The host's timing noise: the best P50 MAPE any fixed prediction can reach here.

Times one iteration shape, the same one over and over, back to back for
``--seconds`` (the profiler's pass, ``tiny`` on one CPU thread) and prints how
far the single times fall from their own median. That median is the best
constant prediction there is, so its MAPE is a floor under the online P50 MAPE
of any cost table on this host, measured in the same minutes. Also
printed: the MAPE against a rolling median of 101 iterations (what is left once
slow drifts of the host's speed are followed) and the medians of six equal
stretches of the run, relative to the whole run's (the slow drift itself).

    python benchmarks/timing_noise.py [--seconds 60] [--point 4,0,450,0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from servecal.profiler.design import Point
from servecal.profiler.model import build_model
from servecal.profiler.runner import ContiguousLayout
from servecal.profiler.shapes import ModelShape
from servecal.profiler.timing import CpuClock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--point", default="4,0,450,0", help="n_decode,chunk,ctx,prefix")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build_model(ModelShape.from_name("tiny"))
    point = Point(*(int(v) for v in args.point.split(",")))
    prepared = ContiguousLayout().prepare(model, point)  # the very same iteration each time
    clock = CpuClock()
    for _ in range(10):
        prepared.time(clock)
    times = []
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        times.append(sum(prepared.time(clock)))
    ms = pd.Series(times)
    median = ms.median()
    rolling = ms.rolling(101, center=True, min_periods=20).median()
    stretches = ms.groupby(np.arange(len(ms)) * 6 // len(ms)).median() / median
    print(f"{point.label()}: {len(ms)} iterations in {args.seconds:.0f} s")
    print(f"median {median:.2f} ms; MAPE against it {((ms - median).abs() / ms).mean():.1%}")
    print(f"MAPE against a rolling median of 101: {((ms - rolling).abs() / ms).mean():.1%}")
    quantiles = (ms / median).quantile([0.05, 0.25, 0.75, 0.95, 0.99])
    print("time / median at 5, 25, 75, 95, 99 %: " + ", ".join(f"{q:.2f}" for q in quantiles))
    print("six stretches' medians / median: " + ", ".join(f"{s:.2f}" for s in stretches))


if __name__ == "__main__":
    main()
