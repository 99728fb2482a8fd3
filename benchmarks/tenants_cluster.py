"""The ``tenants`` workload on a cluster: SLO-class routing against one shared pool.

    python benchmarks/tenants_cluster.py [--replicas 10] [--seeds 3] [--requests 10000]
        [--jobs 2] [--out runs/tenants-cluster.json]

Both fleets have the same replicas (the ``device`` truth and its fitted table, one GPU
each) and the same router inside a pool (``least-requests``). *Shared*: every request
may go to any replica. *Tiered*: each TPOT tier (strict 10 ms, standard 25 ms, relaxed
50 ms at ``--tpot-slo 25``) has its own replicas, in proportion to its share of the
traffic (30/40/30: 3/4/3 of 10), so strict requests never sit in the batches that take
big prefill chunks. For SLOWeave and fixed-512 (the best fixed chunk on ``tenants``,
docs/results/2026-12-01-scheduling-max-goodput.md), the maximum goodput of each fleet
is searched per seed (the highest rate with ≥ 90% of requests good; common random
numbers within a search) and printed with its mean over seeds and per GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from servecal.sched.cluster import ClusterSpec, ReplicaSpec
from servecal.sched.experiment import Bracket, sweep
from servecal.sched.policies.registry import PolicySpec

SHARES = (("strict", 0.3), ("standard", 0.4), ("relaxed", 0.3))


def tiers(n: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Replica indices per tier, in proportion to the tiers' shares (largest remainder)."""
    exact = [share * n for _, share in SHARES]
    counts = [int(x) for x in exact]
    for k in sorted(range(len(SHARES)), key=lambda k: exact[k] - counts[k], reverse=True):
        if sum(counts) < n:
            counts[k] += 1
    out, start = [], 0
    for (name, _), c in zip(SHARES, counts, strict=True):
        out.append((name, tuple(range(start, start + c))))
        start += c
    return tuple(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=Path("runs/tenants-cluster.json"))
    args = parser.parse_args()
    n = args.replicas
    specs, names = [], []
    for policy in ("sloweave", "fixed-512"):
        replicas = tuple(ReplicaSpec(PolicySpec(policy), name="A100x1") for _ in range(n))
        for fleet, groups in (("shared", ()), ("tiered", tiers(n))):
            specs.append(ClusterSpec("tenants", replicas, PolicySpec("least-requests"), groups,
                                     tpot_slo_ms=25.0, rate=50.0 * n, n_requests=args.requests,
                                     seeds=tuple(range(args.seeds))))  # fmt: skip
            names.append((policy, fleet))
    bracket = Bracket(30.0 * n, 80.0 * n, rel_tol=0.02)
    start = time.perf_counter()
    outcomes = sweep(specs, goodput=bracket, jobs=args.jobs)
    wall = time.perf_counter() - start
    rows = []
    for (policy, fleet), o in zip(names, outcomes, strict=True):
        m = o.mean
        rows.append({"policy": policy, "fleet": fleet, "replicas": n,
                     "tiers": dict(o.spec.groups) if o.spec.groups else None,
                     "max_goodput": m["max_goodput"], "max_goodput_std": m.get("max_goodput_std"),
                     "per_seed": m["max_goodput_per_seed"],
                     "bound": m["max_goodput_bound"]})  # fmt: skip
    print(f"tenants · TPOT 25 ms (tiers 10/25/50 ms) · {n} replicas · {args.seeds} seeds · "
          f"{args.requests} requests · least-requests · {wall:.0f} s")  # fmt: skip
    print("| policy | fleet | max goodput req/s | per GPU | per seed |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        seeds = ", ".join(f"{x:.1f}" for x in r["per_seed"])
        spread = r["max_goodput_std"] or 0.0
        print(f"| {r['policy']} | {r['fleet']} | {r['max_goodput']:.1f} ± {spread:.1f} | "
              f"{r['max_goodput'] / n:.1f} | {seeds} |")  # fmt: skip
    by = {(r["policy"], r["fleet"]): r["max_goodput"] for r in rows}
    for policy in ("sloweave", "fixed-512"):
        print(f"{policy}: tiered / shared = {by[(policy, 'tiered')] / by[(policy, 'shared')]:.3f}×")
    best_shared = max(by[(p, "shared")] for p in ("sloweave", "fixed-512"))
    print(f"SLOWeave tiered / best shared = {by[('sloweave', 'tiered')] / best_shared:.3f}×")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "wall_s": wall}, indent=1) + "\n")


if __name__ == "__main__":
    main()
