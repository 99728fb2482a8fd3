"""Prefix cache cost: one ``simulate``-sized run (default truth and predictor, SLOWeave)
on a Mooncake trace with the prefix cache on and off, CPU seconds of each.

Run: ``python benchmarks/prefix_cache.py TRACE.jsonl [--requests 2000] [--rate R]
[--rounds 3]``. TRACE is Mooncake's conversation trace (kvcache-ai/Mooncake,
``FAST25-release/traces/conversation_trace.jsonl``). The two runs alternate
(``--rounds`` pairs, in one process, after one warm-up pair) so the shared host's
speed changes fall on both; the result is each side's best CPU time, their ratio
(target: cached ≤ 1.3× uncached) and the CPU time per simulated iteration (the
cached run simulates fewer prefill tokens, so its run can be cheaper in total while
each iteration costs more).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from servecal.sched.experiment import RunSpec, run
from servecal.sched.metrics import summarize
from servecal.sched.policies.registry import PolicySpec


def _timed(spec: RunSpec) -> tuple[float, int, float | None]:
    t0 = time.process_time()
    result = run(spec, 0)
    cpu = time.process_time() - t0
    share = summarize(result.request_columns, result.iteration_columns).get("prefix_hit_share")
    return cpu, len(result.iteration_columns["duration_ms"]), share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=None, help="req/s [the trace's own]")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    spec = RunSpec(
        workload=f"trace:{args.trace}",
        policy=PolicySpec.parse("sloweave"),
        tpot_slo_ms=50.0,
        rate=args.rate,
        n_requests=args.requests,
    )
    sides = {"on": replace(spec, prefix_cache="on"), "off": replace(spec, prefix_cache="off")}
    for s in sides.values():  # warm-up: imports, numba's compiled kernels
        _timed(replace(s, n_requests=20))
    best: dict[str, tuple[float, int, float | None]] = {}
    for _ in range(args.rounds):
        for name, s in sides.items():
            cpu, iters, share = _timed(s)
            if name not in best or cpu < best[name][0]:
                best[name] = (cpu, iters, share)
    out = {
        name: {"cpu_s": cpu, "iterations": iters, "cpu_us_per_iteration": cpu / iters * 1e6,
               "prefix_hit_share": share}
        for name, (cpu, iters, share) in best.items()
    }  # fmt: skip
    out["ratio_cpu_on_over_off"] = best["on"][0] / best["off"][0]
    out["ratio_per_iteration"] = (
        out["on"]["cpu_us_per_iteration"] / out["off"]["cpu_us_per_iteration"]
    )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
