"""What a job backend costs on top of the work: local worker processes vs Ray tasks.

Two measurements per backend, in one process, on this machine:

* ``--trivial N`` jobs that return at once (``num_cpus=1``): the backend's own cost
  per job (start-up excluded: one warm-up job runs first) — what an experiment sweep
  of many short cells pays;
* the two-job ``tiny`` CPU calibration plan (9 points × 12 repeats each, as in the
  tests) through ``run_fleet``, twice into fresh folders (the first pays the
  imports of torch in the driver and the workers): wall time of the whole plan
  against the sum of the jobs' own time (calibrate and fit).

    python benchmarks/fleet_overhead.py [--trivial 200] [--backends local,ray]

Ray starts a local instance with 2 CPUs (its start-up is printed separately).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from servecal.profiler.fleet import load_plan, run_fleet
from servecal.profiler.jobs import Job, open_backend

GRID = {"n_decode": [0, 2, 4], "chunk": [0, 16], "ctx": [16, 64], "prefix": [0]}
PLAN = {
    "defaults": {"grid": GRID, "repeats": 12, "threads": 1},
    "job": [
        {"name": "tiny-a", "device": "cpu", "model": "tiny"},
        {"name": "tiny-b", "device": "cpu", "model": "tiny", "seed": 1},
    ],
}


def trivial(backend, count: int) -> float:
    """Seconds per job for ``count`` jobs that do nothing (after one warm-up job)."""
    list(backend.run([Job("warm", os.getpid)]))
    start = time.perf_counter()
    results = list(backend.run([Job(str(i), os.getpid) for i in range(count)]))
    assert all(r.ok for r in results)
    return (time.perf_counter() - start) / count


def plan_run(backend, folder: Path) -> tuple[float, float]:
    """(wall s of the whole plan, sum of the jobs' own wall s)."""
    path = folder / "plan.json"
    path.write_text(json.dumps(PLAN))
    start = time.perf_counter()
    outcome = run_fleet(load_plan(path), folder / "out", backend)
    wall = time.perf_counter() - start
    index = json.loads(outcome.index.read_text())["jobs"]
    assert not outcome.failed, {k: v["error"] for k, v in index.items()}
    return wall, sum(v["wall_s"] for v in index.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trivial", type=int, default=200)
    parser.add_argument("--backends", default="local,ray")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    for kind in args.backends.split(","):
        start = time.perf_counter()
        options = {"num_cpus": 2, "include_dashboard": False} if kind == "ray" else {}
        with open_backend(kind, **options) as backend:
            startup = time.perf_counter() - start
            per_job = trivial(backend, args.trivial)
            runs = []
            for _ in range(2):
                with tempfile.TemporaryDirectory() as tmp:
                    runs.append(plan_run(backend, Path(tmp)))
        plans = "; ".join(
            f"{label} {wall:.1f} s wall for {jobs:.1f} s of jobs (+{(wall - jobs) / 2:.1f} s/job)"
            for label, (wall, jobs) in zip(("cold", "warm"), runs, strict=True)
        )
        print(
            f"{kind:>5}: start-up {startup:.1f} s; {1000 * per_job:.1f} ms per trivial job "
            f"({args.trivial} jobs); tiny plan: {plans}"
        )


if __name__ == "__main__":
    main()
