"""Wall time of one compare grid on the local process pool and on Ray, in one run.

The grid is what `servecal compare` builds (workloads × policies × one TPOT target ×
seeds, run folders written), swept twice per pool, alternating local and Ray, with
the same ``--jobs``; then, optionally, the same specs with a max-goodput search.
Ray runs on a local instance with ``--jobs`` CPUs started once (its start-up is
printed apart: on a cluster it is paid once per command). Every Ray sweep's rows
must equal the local ones (asserted), so the timing compares the same work.

    python benchmarks/compare_ray.py [--jobs 2] [--requests 500] [--seeds 2] [--goodput]

Prints the load average before and after: on a shared machine the ratio (Ray / local,
measured in one run) is the figure to read, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from servecal.profiler.jobs import open_backend
from servecal.sched.experiment import Bracket, RunSpec, default_rate, sweep
from servecal.sched.experiment.rows import row
from servecal.sched.policies import PolicySpec

WORKLOADS = ("chat", "mixed", "long", "bursty")
POLICIES = ("fixed-256", "fixed-1024", "full", "sloweave")


def specs(requests: int, seeds: int) -> list[RunSpec]:
    return [
        RunSpec(
            workload=w,
            policy=PolicySpec(p),
            tpot_slo_ms=25.0,
            rate=default_rate(w),
            n_requests=requests,
            seeds=tuple(range(seeds)),
        )  # fmt: skip
        for w in WORKLOADS
        for p in POLICIES
    ]


def timed(grid: list[RunSpec], jobs: int, pool, goodput: Bracket | None) -> tuple[float, list, int]:
    """(wall s, rows, runs) of one sweep of ``grid`` into a fresh folder."""
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = [Path(tmp) / s.workload / s.policy.label for s in grid]
        start = time.perf_counter()
        outcomes = sweep(
            grid, folders=folders, goodput=goodput, jobs=jobs, pool=pool, on_progress=seen.append
        )
        return time.perf_counter() - start, [row(o) for o in outcomes], len(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--goodput", action="store_true", help="also time a max-goodput search")
    args = parser.parse_args()
    grid = specs(args.requests, args.seeds)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"grid: {len(grid)} cells × {args.seeds} seeds = {len(grid) * args.seeds} runs of "
          f"{args.requests} requests, --jobs {args.jobs}")  # fmt: skip
    start = time.perf_counter()
    with open_backend("ray", num_cpus=args.jobs, include_dashboard=False) as backend:
        print(f"ray start-up: {time.perf_counter() - start:.1f} s ({backend.describe()})")
        searches = [None, Bracket(5.0, 40.0)] if args.goodput else [None]
        for bracket in searches:
            label = "max-goodput search" if bracket else "grid"
            walls: dict[str, list[float]] = {"local": [], "ray": []}
            for attempt in ("cold", "warm"):
                for kind in ("local", "ray"):
                    pool = backend.pool(max_in_flight=args.jobs) if kind == "ray" else None
                    wall, rows, runs = timed(grid, args.jobs, pool, bracket)
                    if pool is not None:
                        pool.shutdown()
                    if kind == "local":
                        reference = rows
                    else:
                        assert rows == reference, "Ray gave other numbers than the local pool"
                    walls[kind].append(wall)
                    print(f"{label:<18} {attempt} {kind:<5}: {wall:6.1f} s ({runs} runs)")
            ratio = [r / loc for r, loc in zip(walls["ray"], walls["local"], strict=True)]
            print(f"{label}: ray / local wall = {ratio[0]:.2f} (cold), {ratio[1]:.2f} (warm)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
