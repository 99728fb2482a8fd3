"""What calibration is worth: SLOWeave planned five ways at one rate.

    python benchmarks/calibration_value.py --out DIR [--workloads mixed]
        [--tpot-slo 10,25] [--seeds 3] [--requests 2000] [--drift 30%:1.15]
        [--opt KEY=VALUE ...] [--jobs N] [--quick]

For each (workload, TPOT target), on the default truth (``device``):

1. search the max goodput of SLOWeave planning on the fitted table's P99 + δ (the
   default predictor) per seed; the common rate ``R`` is its mean over seeds;
2. run SLOWeave at ``R``, every seed, planned on (a) the oracle, (b) the fitted
   P99 + δ, (c) the same table's P50 only (``sloweave-p50``), (d) a stale table —
   the truth drifted ×1.15 from 30% of the run on, the drift monitor watching — and
   (e) the same with the monitor's adaptive margin; each also searches its own max
   goodput (the drift at the same share of every probe's run).

Run folders go to ``DIR/<workload>/tpot-<D>/<a|b|c|d|e>/seed-<k>/`` (``servecal report
DIR`` shows them in its "What calibration is worth" section), the summary to
``DIR/calibration_value.json``. It prints TPOT attainment and max goodput per
configuration and checks the issue's two claims: P50-only planning loses TPOT
attainment against P99 + δ at ``R``, and the adaptive margin brings the drifted run
back to within 2 points of the undrifted (b). Deterministic given the seeds; the
load average only changes the wall time (printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

#: (key, label, policy, spec fields): the five configurations of the issue.
CONFIGS = (
    ("a", "oracle", "sloweave", {"predictor": "oracle"}),
    ("b", "fitted P99 + δ", "sloweave", {}),
    ("c", "fitted P50 only", "sloweave-p50", {}),
    ("d", "stale table", "sloweave", {"drift": "DRIFT", "monitor": True}),
    ("e", "stale + adaptive margin", "sloweave", {"drift": "DRIFT", "adaptive_margin": True}),
)
#: How close (TPOT attainment, share) the adaptive margin must bring a drifted run.
WITHIN = 0.02


def _spec(workload: str, tpot: float, rate: float, args: argparse.Namespace, policy: str,
          fields: dict[str, Any]) -> Any:  # fmt: skip
    from servecal.sched.experiment import RunSpec
    from servecal.sched.policies import PolicySpec
    from servecal.sched.policies.options import split_assignments

    extra = {k: (args.drift if v == "DRIFT" else v) for k, v in fields.items()}
    return RunSpec(
        workload, PolicySpec.parse(policy, split_assignments(args.opt)), tpot, rate,
        n_requests=args.requests, seeds=tuple(range(args.seeds)), **extra,
    )  # fmt: skip


def _stats(values: list[float]) -> dict[str, float]:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "per_seed": [float(x) for x in v]}  # fmt: skip


def study(args: argparse.Namespace) -> dict[str, Any]:
    from servecal.sched.experiment import Bracket, check, sweep

    bracket = Bracket.parse(args.rate_range, args.rate_tol)
    cells = []
    for workload in args.workloads:
        for tpot in args.tpot_slo:
            reference = _spec(workload, tpot, 1.0, args, "sloweave", {})
            check(reference, searching=True)
            (found,) = sweep([reference], goodput=bracket, jobs=args.jobs)
            rate = math.floor(10 * found.mean["max_goodput"]) / 10
            specs = [_spec(workload, tpot, rate, args, p, f) for _, _, p, f in CONFIGS]
            for spec in specs:
                check(spec, searching=True)
            base = args.out / workload / f"tpot-{tpot:g}"
            folders = [base / key for key, *_ in CONFIGS]
            outcomes = sweep(specs, folders=folders, goodput=bracket, jobs=args.jobs,
                             on_progress=_progress(f"{workload} {tpot:g} ms"))  # fmt: skip
            rows = {}
            for (key, label, *_), outcome in zip(CONFIGS, outcomes, strict=True):
                s = outcome.summaries
                rows[key] = {
                    "label": label,
                    "spec": outcome.spec.describe(),
                    "tpot_attainment": _stats([x["tpot_attainment"] for x in s]),
                    "attainment": _stats([x["attainment"] for x in s]),
                    "p99_tpot_ms": _stats([x["p99_tpot_ms"] for x in s]),
                    "online_p99_coverage": _stats([x["online"]["p99_coverage"] for x in s]),
                    "max_goodput": _stats(outcome.mean["max_goodput_per_seed"]),
                    "max_goodput_bound": outcome.mean["max_goodput_bound"],
                }
            cells.append({"workload": workload, "tpot_slo_ms": tpot, "rate": rate, "rows": rows,
                          "checks": _checks(rows)})  # fmt: skip
    return {"cells": cells}


def _checks(rows: dict[str, Any]) -> dict[str, Any]:
    tpot = {k: r["tpot_attainment"]["mean"] for k, r in rows.items()}
    return {
        "p50_loses_tpot_attainment": tpot["c"] < tpot["b"],
        "adaptive_within_2_points": tpot["e"] >= tpot["b"] - WITHIN,
        "drift_costs_without_adaptation": tpot["d"] < tpot["b"] - WITHIN,
    }


def _progress(label: str):  # noqa: ANN202 - a callback
    def show(p: Any) -> None:
        if p.done % 25 == 0:
            print(f"  {label}: {p.done} runs", file=sys.stderr, flush=True)

    return show


def _print(doc: dict[str, Any]) -> None:
    for cell in doc["cells"]:
        print(f"\n{cell['workload']}, TPOT {cell['tpot_slo_ms']:g} ms, at {cell['rate']:g} req/s "
              "(SLOWeave's max goodput on the fitted P99 + δ)")  # fmt: skip
        print(f"{'planning':32s} {'TPOT att.':>14s} {'SLO att.':>14s} {'P99 TPOT':>9s} "
              f"{'coverage':>9s} {'max goodput':>14s}")  # fmt: skip
        for key, r in cell["rows"].items():
            t, a = r["tpot_attainment"], r["attainment"]
            m = r["max_goodput"]
            bound = "" if r["max_goodput_bound"] == "measured" else f" ({r['max_goodput_bound']})"
            print(f"({key}) {r['label']:28s} {100 * t['mean']:7.2f} ± {100 * t['std']:4.2f} "
                  f"{100 * a['mean']:7.2f} ± {100 * a['std']:4.2f} "
                  f"{r['p99_tpot_ms']['mean']:9.2f} {100 * r['online_p99_coverage']['mean']:8.2f}% "
                  f"{m['mean']:7.2f} ± {m['std']:4.2f}{bound}")  # fmt: skip
        print(
            "checks: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in cell["checks"].items())
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workloads", default="mixed")
    parser.add_argument("--tpot-slo", default="10,25")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--drift", default="30%:1.15")
    parser.add_argument("--opt", action="append", default=[], help="SLOWeave option KEY=VALUE")
    parser.add_argument("--rate-range", default="10:60")
    parser.add_argument("--rate-tol", type=float, default=0.01)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="1 seed, 300 requests (a smoke run)")
    args = parser.parse_args()
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.tpot_slo = [float(t) for t in args.tpot_slo.split(",") if t]
    if args.quick:
        args.seeds, args.requests = 1, 300
    start, load = time.time(), os.getloadavg()
    doc = study(args)
    doc.update({
        "command": " ".join(sys.argv),
        "seeds": args.seeds, "requests": args.requests, "drift": args.drift, "opt": args.opt,
        "wall_s": time.time() - start, "load_average_start": load,
        "load_average_end": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    })  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration_value.json").write_text(json.dumps(doc, indent=2) + "\n")
    _print(doc)
    print(f"\nwall {doc['wall_s']:.0f} s, load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
