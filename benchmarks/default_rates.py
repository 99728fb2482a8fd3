"""Derive the default offered rates (``sched/experiment/spec.py: DEFAULT_RATES``).

    python benchmarks/default_rates.py [--seeds 3] [--requests 2000] [--jobs N]

A default rate puts a workload at a known operating point of a reference policy on
the default truth and predictor (``device``, ``fitted``):

* ``mixed``, ``long``, ``bursty``: SLOWeave at a 25 ms TPOT target attains what
  docs/spec.md §1 reports for it (79.4%, 66.2%, 88.6% of requests within SLO), so that a
  table at the default rate is read at the paper's operating point; ``chat`` takes
  mixed's rate (its prompts are mixed's short class);
* ``tenants``: SLOWeave at ``--tpot-slo 25`` at its maximum goodput (90%): the paper
  has no figure for it;
* ``multislo``: FlowPrefill's maximum goodput (90%), colocated (engine TPOT SLOs of
  the classes) and on a prefill-only instance (TTFT only).

Each is found per seed by the max-goodput search with the operating point as its
target (the highest rate whose attainment stays at or above it, to 1%), averaged
over seeds and rounded down to a whole req/s. Prints a line per workload with the
per-seed rates; deterministic given the seeds.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

#: (workload, setting, policy, TPOT target ms, attainment target)
POINTS = (
    ("mixed", "colocated", "sloweave", 25.0, 0.794),
    ("long", "colocated", "sloweave", 25.0, 0.662),
    ("bursty", "colocated", "sloweave", 25.0, 0.886),
    ("tenants", "colocated", "sloweave", 25.0, 0.9),
    ("multislo", "colocated", "flowprefill", None, 0.9),
    ("multislo", "prefill", "flowprefill", None, 0.9),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--only", default=None, help="comma-separated workloads")
    args = parser.parse_args()
    from servecal.sched.experiment import Bracket, RunSpec, check, choose_backend, sweep
    from servecal.sched.policies import PolicySpec

    only = set(args.only.split(",")) if args.only else None
    points = [p for p in POINTS if only is None or p[0] in only]
    specs, brackets = [], []
    for workload, setting, policy, tpot, target in points:
        spec = RunSpec(workload, PolicySpec(policy), tpot, 10.0, n_requests=args.requests,
                       seeds=tuple(range(args.seeds)), setting=setting,
                       backend=choose_backend(PolicySpec(policy), setting))  # fmt: skip
        check(spec, searching=True)
        specs.append(spec)
        brackets.append(Bracket(10.0, 80.0, target=target, rel_tol=0.01))
    start, load = time.time(), os.getloadavg()
    outcomes = sweep(specs, goodput=brackets, jobs=args.jobs)
    for (workload, setting, policy, tpot, target), o in zip(points, outcomes, strict=True):
        rates = o.mean["max_goodput_per_seed"]
        mean = sum(rates) / len(rates)
        print(f"{workload:9s} {setting:9s} {policy:11s} TPOT {tpot or '-'!s:>4} "
              f"attainment >= {100 * target:.1f}%: {mean:6.2f} req/s "
              f"(seeds {', '.join(f'{r:.2f}' for r in rates)}; "
              f"{o.mean['max_goodput_bound']}) -> {math.floor(mean)}")  # fmt: skip
    print(
        f"wall {time.time() - start:.0f} s, load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
