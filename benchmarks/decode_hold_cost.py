"""What SLOWeave's decode hold costs where it never binds: a run with
``control_hold_cliffs`` on against the same run with it off, interleaved in one process.

    nice -n 19 python benchmarks/decode_hold_cost.py --rounds 6

On the ``device`` truth (its ``fitted`` table) nothing binds, so both runs decide
alike; the script checks that (same iterations, same attainment) and then gives each
side's median time and their ratio — the host's CPUs change speed, so only a ratio
within one run means anything. The hold's work is a question per completed prompt
(``sched/policies/decode_cliff.py``).
"""

from __future__ import annotations

import argparse
import statistics
import time

from servecal.sched import experiment as ex
from servecal.sched.policies.registry import PolicySpec


def _spec(hold: bool, workload: str, tpot_ms: float, rate: float, requests: int) -> ex.RunSpec:
    policy = PolicySpec.parse("sloweave", {"control_hold_cliffs": str(hold).lower()})
    spec = ex.RunSpec(workload, policy, tpot_ms, 1.0, n_requests=requests, truth="device")
    return spec.at_rate(rate)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--tpot-slo", type=float, default=25.0)
    parser.add_argument("--rate", type=float, default=55.0, help="req/s (near the maximum)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    specs = {
        hold: _spec(hold, args.workload, args.tpot_slo, args.rate, args.requests)
        for hold in (True, False)
    }
    outcome = {}
    for hold, spec in specs.items():  # also warms both up
        run = ex.run(spec, 0)
        outcome[hold] = (len(run.iterations["chunk"]), ex.summarize(spec, run)["attainment"])
    if outcome[True] != outcome[False]:
        print(f"the hold changed the run (iterations, attainment): {outcome}")
        return 1
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for hold in (True, False) if r % 2 else (False, True):
            t0 = time.perf_counter()
            ex.run(specs[hold], 0)
            times[hold].append(time.perf_counter() - t0)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"{args.workload} {args.tpot_slo:g} ms, {args.rate:g} req/s, {args.requests} requests: "
        f"same run ({outcome[True][0]} iterations, attainment {outcome[True][1]:.4f}); "
        f"hold on {on:.3f} s, off {off:.3f} s (median of {args.rounds}): on / off {on / off:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
