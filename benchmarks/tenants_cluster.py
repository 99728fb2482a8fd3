"""The ``tenants`` workload on a cluster: SLO-class routing against one shared pool.

    python benchmarks/tenants_cluster.py [--replicas 10] [--seeds 3] [--requests 10000]
        [--jobs 2] [--out runs/tenants-cluster.json] [--workload tenants|twoclass]
        [--fixed 512] [--tier-chunks tight=512,lenient=2048]

Both fleets have the same replicas (the ``device`` truth and its fitted table, one GPU
each) and the same router inside a pool (``least-requests``). *Shared*: every request
may go to any replica. *Tiered*: each TPOT tier (strict 10 ms, standard 25 ms, relaxed
50 ms at ``--tpot-slo 25``) has its own replicas, in proportion to its share of the
traffic (30/40/30: 3/4/3 of 10), so strict requests never sit in the batches that take
big prefill chunks. For SLOWeave and fixed-512 (the best fixed chunk on ``tenants``,
docs/results/2026-12-01-scheduling-max-goodput.md), the maximum goodput of each fleet
is searched per seed (the highest rate with ≥ 90% of requests good; common random
numbers within a search) and printed with its mean over seeds and per GPU.

``--workload twoclass`` (20% at 10 ms, 80% at 50 ms) routes its two classes the same
way; the tiers and their shares are read from the workload. ``--fixed`` is the static
chunk of the shared and tiered fixed fleets; ``--tier-chunks`` adds a tiered fleet of
static policies each sized for its own tier (``tier=chunk``, every tier named): the
best a static chunk can do with class routing.
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


def tier_shares(workload: str) -> tuple[tuple[str, float], ...]:
    """``(tier, share)`` of a tiered workload: its classes are ``<length>-<tier>``."""
    from servecal.sched.workloads import WORKLOADS

    shares: dict[str, float] = {}
    classes = WORKLOADS[workload].classes
    total = sum(c.share for c in classes)
    for c in classes:
        tier = c.name.rsplit("-", 1)[-1]
        shares[tier] = shares.get(tier, 0.0) + c.share / total
    return tuple(shares.items())


def tiers(
    n: int, shares: tuple[tuple[str, float], ...] = SHARES
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Replica indices per tier, in proportion to the tiers' shares (largest remainder)."""
    exact = [share * n for _, share in shares]
    counts = [int(x) for x in exact]
    for k in sorted(range(len(shares)), key=lambda k: exact[k] - counts[k], reverse=True):
        if sum(counts) < n:
            counts[k] += 1
    out, start = [], 0
    for (name, _), c in zip(shares, counts, strict=True):
        out.append((name, tuple(range(start, start + c))))
        start += c
    return tuple(out)


def parse_tier_chunks(text: str, names: list[str]) -> dict[str, int]:
    """``tight=512,lenient=2048`` → ``{tier: chunk}``, every tier of ``names`` named."""
    out: dict[str, int] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        tier, _, chunk = item.partition("=")
        if tier not in names or not chunk.isdigit() or int(chunk) < 1:
            raise SystemExit(f"error: --tier-chunks {text!r}: expected TIER=CHUNK for {names}")
        out[tier] = int(chunk)
    if set(out) != set(names):
        raise SystemExit(f"error: --tier-chunks {text!r}: name every tier of {names}")
    return out


def fleets(
    n: int, shares: tuple[tuple[str, float], ...], fixed: str, tier_chunks: dict[str, int]
) -> list[tuple[str, str, tuple[ReplicaSpec, ...], tuple[tuple[str, tuple[int, ...]], ...]]]:
    """``(policy label, fleet, replicas, groups)`` of every fleet the study runs."""
    groups = tiers(n, shares)
    out = []
    for policy in ("sloweave", fixed):
        replicas = tuple(ReplicaSpec(PolicySpec(policy), name="A100x1") for _ in range(n))
        out += [(policy, "shared", replicas, ()), (policy, "tiered", replicas, groups)]
    if tier_chunks:
        policy_of = {i: f"fixed-{tier_chunks[t]}" for t, members in groups for i in members}
        replicas = tuple(ReplicaSpec(PolicySpec(policy_of[i]), name="A100x1") for i in range(n))
        label = "/".join(f"fixed-{tier_chunks[t]}" for t, _ in groups)
        out.append((label, "tiered", replicas, groups))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=Path("runs/tenants-cluster.json"))
    parser.add_argument("--workload", default="tenants", choices=("tenants", "twoclass"))
    parser.add_argument("--fixed", type=int, default=512, help="the fixed fleets' chunk")
    parser.add_argument("--tier-chunks", default="", help="tier=chunk,...: tiered static fleet")
    args = parser.parse_args()
    n = args.replicas
    shares = tier_shares(args.workload)
    fixed = f"fixed-{args.fixed}"
    tier_chunks = parse_tier_chunks(args.tier_chunks, [t for t, _ in shares])
    specs, names = [], []
    for policy, fleet, replicas, groups in fleets(n, shares, fixed, tier_chunks):
        specs.append(ClusterSpec(args.workload, replicas, PolicySpec("least-requests"), groups,
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
    tier_text = ", ".join(f"{t} {share:.0%}" for t, share in shares)
    print(f"{args.workload} · TPOT 25 ms ({tier_text}) · {n} replicas · {args.seeds} seeds · "
          f"{args.requests} requests · least-requests · {wall:.0f} s")  # fmt: skip
    print("| policy | fleet | max goodput req/s | per GPU | per seed |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        seeds = ", ".join(f"{x:.1f}" for x in r["per_seed"])
        spread = r["max_goodput_std"] or 0.0
        print(f"| {r['policy']} | {r['fleet']} | {r['max_goodput']:.1f} ± {spread:.1f} | "
              f"{r['max_goodput'] / n:.1f} | {seeds} |")  # fmt: skip
    by = {(r["policy"], r["fleet"]): r["max_goodput"] for r in rows}
    for policy in ("sloweave", fixed):
        print(f"{policy}: tiered / shared = {by[(policy, 'tiered')] / by[(policy, 'shared')]:.3f}×")
    best_shared = max(by[(p, "shared")] for p in ("sloweave", fixed))
    print(f"SLOWeave tiered / best shared = {by[('sloweave', 'tiered')] / best_shared:.3f}×")
    best_tiered_static = max(v for (p, f), v in by.items() if f == "tiered" and p != "sloweave")
    print(f"SLOWeave tiered / best tiered static = "
          f"{by[('sloweave', 'tiered')] / best_tiered_static:.3f}×")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "wall_s": wall}, indent=1) + "\n")


if __name__ == "__main__":
    main()
