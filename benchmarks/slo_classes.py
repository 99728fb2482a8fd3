"""Heterogeneous TPOT SLOs on one engine: SLOWeave against every fixed chunk.

    nice -n 10 python benchmarks/slo_classes.py --out DIR [--workloads twoclass,tenants]
        [--tpot-slo 25] [--policies sloweave,fixed-256,...] [--seeds 3] [--requests 1000]
        [--truth device] [--predictor fitted] [--jobs 2]

For every workload whose requests carry several TPOT SLOs (``twoclass``: 20% at 0.4×,
80% at 2× the run's target; ``tenants``: 30/40/30% at 0.4×/1×/2×), every policy and
seed, the maximum goodput is searched twice with ``compare --max-goodput``'s search
(bracket 1:200, 2% tolerance, the same seeds for every policy):

* **pooled** — ≥ 90% of *all* requests good, as ``compare`` counts it; a minority class
  can then be given up in part (a class of ≤ 10% entirely) and the rate still count;
* **per class** — ≥ 90% good in *every* TPOT class (``summary["by_tpot_slo"]``), the
  reading in which a static chunk has to serve the tight class too.

Probes are shared between the two searches (same rate, same seed: the same run). At
SLOWeave's pooled maximum of each seed it also records how often the tight class binds
its chunk: the share of iterations carrying a prefill whose planning budget is at most
the tightest TPOT (a tight request is decoding, since a budget is the earliest deadline
minus now), and the mean prefill chunk with and without one.

Writes ``DIR/slo_classes.json`` and prints one table per workload and criterion.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BRACKET = "1:200"


@dataclass(frozen=True)
class Task:
    """One (workload, policy, seed): both searches."""

    workload: str
    policy: str
    tpot: float
    seed: int
    requests: int
    truth: str
    predictor: str


def class_attainment(summary: dict[str, Any]) -> float:
    """The lowest attainment over the run's TPOT classes (pooled if it has one)."""
    tiers = summary.get("by_tpot_slo") or {}
    return min((t["attainment"] for t in tiers.values()), default=summary["attainment"])


def binding(spec: Any, result: Any) -> dict[str, float]:
    """How often the tightest TPOT bounds the planning budget of a prefill iteration."""
    import numpy as np

    it = result.iterations
    chunk = np.asarray(it["chunk"], dtype=float)
    budget = np.asarray(it["budget_ms"], dtype=float)
    tight = float(np.min(np.asarray(result.requests["tpot_slo_ms"], dtype=float)))
    prefill = (chunk > 0) & np.isfinite(budget)
    with_tight = prefill & (budget <= tight + 1e-9)
    without = prefill & ~with_tight
    return {
        "prefill_iterations": int(prefill.sum()),
        "tight_binds_share": float(with_tight.sum() / max(1, prefill.sum())),
        "mean_chunk_tight": float(chunk[with_tight].mean()) if with_tight.any() else float("nan"),
        "mean_chunk_without": float(chunk[without].mean()) if without.any() else float("nan"),
    }


def search_task(task: Task) -> dict[str, Any]:
    """Both searches of one task (probes memoised by rate)."""
    from servecal.sched import experiment as ex
    from servecal.sched.experiment.goodput import Bracket, search_sequentially
    from servecal.sched.policies import PolicySpec

    spec = ex.RunSpec(task.workload, PolicySpec.parse(task.policy, {}), task.tpot, 1.0,
                      n_requests=task.requests, seeds=(0,), truth=task.truth,
                      predictor=task.predictor)  # fmt: skip
    runs: dict[float, tuple[dict[str, Any], Any]] = {}

    def probe(rate: float) -> dict[str, Any]:
        if rate not in runs:
            at = spec.at_rate(rate)
            result = ex.run(at, task.seed)
            runs[rate] = (ex.summarize(at, result), result)
        return runs[rate][0]

    out: dict[str, Any] = {"task": task.__dict__}
    for name, measure in (("pooled", lambda s: s["attainment"]), ("per_class", class_attainment)):
        found = search_sequentially(lambda r, m=measure: m(probe(r)), Bracket.parse(BRACKET))
        summary = probe(found.rate) if found.rate > 0 else {}
        out[name] = {
            "max_goodput": found.rate,
            "bound": found.bound,
            "attainment": summary.get("attainment"),
            "by_tpot_slo": {k: v["attainment"] for k, v in summary.get("by_tpot_slo", {}).items()},
        }
        if name == "pooled" and task.policy.startswith("sloweave") and found.rate > 0:
            out["binding"] = binding(spec, runs[found.rate][1])
    out["probes"] = len(runs)
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def report(results: list[dict[str, Any]], policies: list[str]) -> str:
    """Per workload and criterion: each policy's mean max goodput, SLOWeave / best fixed."""
    lines = []
    workloads = sorted({r["task"]["workload"] for r in results})
    for w in workloads:
        for crit in ("pooled", "per_class"):
            means = {}
            for p in policies:
                rs = [r[crit]["max_goodput"] for r in results
                      if r["task"]["workload"] == w and r["task"]["policy"] == p]  # fmt: skip
                means[p] = _mean(rs)
            fixed = {p: v for p, v in means.items() if p.startswith("fixed-")}
            best = max(fixed, key=fixed.__getitem__) if fixed else None
            row = ", ".join(f"{p} {v:.1f}" for p, v in means.items())
            ratio = (
                f"; sloweave / {best} = {means['sloweave'] / fixed[best]:.3f}×"
                if best and "sloweave" in means and fixed[best] > 0
                else ""
            )
            lines.append(f"{w} [{crit}]: {row}{ratio}")
        for r in results:
            if r["task"]["workload"] == w and "binding" in r:
                b = r["binding"]
                lines.append(
                    f"  {w} sloweave seed {r['task']['seed']}: tight class binds "
                    f"{100 * b['tight_binds_share']:.1f}% of {b['prefill_iterations']} prefill "
                    f"iterations; mean chunk {b['mean_chunk_tight']:.0f} with, "
                    f"{b['mean_chunk_without']:.0f} without"
                )
    return "\n".join(lines)


def register_two_class(shares: list[float]) -> list[str]:
    """``twoclass`` with its tight class at each share (``twoclass-5``: 5%), registered
    in this process's workload table (the pool's workers are forked from it)."""
    from servecal.sched.workloads.classes import TpotTier, tiered
    from servecal.sched.workloads.spec import _MIX, WORKLOADS, WorkloadSpec

    base = WORKLOADS["twoclass"]
    names = []
    for share in shares:
        name = f"twoclass-{100 * share:g}"
        tiers = (TpotTier("tight", share, 0.4), TpotTier("lenient", 1.0 - share, 2.0))
        WORKLOADS[name] = WorkloadSpec(name, f"twoclass, tight {share:.0%}",
                                       tiered(_MIX, tiers), base.arrivals)  # fmt: skip
        names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--workloads", default="twoclass,tenants")
    parser.add_argument("--tpot-slo", type=float, default=25.0)
    parser.add_argument("--policies", default="sloweave,fixed-256,fixed-512,fixed-1024,fixed-2048")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--truth", default="device")
    parser.add_argument("--predictor", default="fitted")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--tight-shares", default="", help="also twoclass with its tight class at these shares"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.requests < 1 or args.jobs < 1 or not args.tpot_slo > 0:
        print("error: --seeds, --requests, --jobs and --tpot-slo must be positive", file=sys.stderr)
        return 2
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    try:
        shares = [float(x) for x in args.tight_shares.split(",") if x.strip()]
    except ValueError:
        print(f"error: --tight-shares {args.tight_shares!r}: expected numbers", file=sys.stderr)
        return 2
    if any(not 0 < x < 1 for x in shares):
        print("error: --tight-shares must be in (0, 1)", file=sys.stderr)
        return 2
    workloads += register_two_class(shares)
    tasks = [Task(w, p, args.tpot_slo, k, args.requests, args.truth, args.predictor)
             for w in workloads for p in policies for k in range(args.seeds)]  # fmt: skip
    started, load = time.time(), os.getloadavg()[0]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(search_task, tasks))
    text = report(results, policies)
    print(text)
    wall = time.time() - started
    print(f"wall {wall:.0f} s, load average {load:.1f} → {os.getloadavg()[0]:.1f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"command": "python benchmarks/slo_classes.py " + " ".join(argv or sys.argv[1:]),
           "wall_s": wall, "results": results}  # fmt: skip
    (out / "slo_classes.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
