"""What pricing energy costs a simulated run: the device truth priced by its power model
(the default) against the same runs with ``power="none"``, alternating, best of N.

    python benchmarks/power_model_cost.py [--rounds 7] [--requests 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from servecal.sched import experiment as ex
from servecal.sched.policies.registry import PolicySpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    base = {"tpot_slo_ms": 25.0, "rate": 60.0, "n_requests": args.requests}
    specs = {
        "priced": ex.RunSpec("mixed", PolicySpec("sloweave"), **base),
        "none": ex.RunSpec("mixed", PolicySpec("sloweave"), power="none", **base),
    }
    for spec in specs.values():  # warm: tables loaded, code compiled
        ex.run(spec, 0)
    times: dict[str, list[float]] = {name: [] for name in specs}
    iterations = 0
    for _ in range(args.rounds):
        for name, spec in specs.items():
            t0 = time.perf_counter()
            result = ex.run(spec, 0)
            times[name].append(time.perf_counter() - t0)
            iterations = len(result.iterations)
    for name, v in times.items():
        print(f"{name:7s} best {min(v):.3f} s, median {statistics.median(v):.3f} s, "
              f"{iterations / min(v):,.0f} iterations/s (best)")  # fmt: skip
    best = min(times["priced"]) / min(times["none"])
    median = statistics.median(times["priced"]) / statistics.median(times["none"])
    print(f"priced / none: {best:.3f} (best), {median:.3f} (median)")


if __name__ == "__main__":
    main()
