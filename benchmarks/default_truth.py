"""How well the ``fitted`` table knows the ``device`` truth: offline and online.

    python benchmarks/default_truth.py [--points 2000] [--requests 2000] [--seeds 3]

Offline, on shapes the table never saw (held-out seed 1616, neither a run's nor the
calibration's), each with 20 iterations drawn from the truth:

* ``visited``: the (n_decode, chunk, ctx, prefix) of iterations a SLOWeave and a
  fixed-512 run on ``mixed`` and ``tenants`` actually executed (a random subset);
* ``uniform``: log-uniform shapes over the table's domain (decodes up to 400,
  chunks up to 6,000, ctx up to 12,000, prefix up to 8,000).

Printed per set: P50 MAPE against each point's measured median (``servecal eval``'s
definition), against the truth's exact median, P99 + δ coverage of the rows, the
bound's tightness, and the oracle's (the truth's own median and jitter) P99 coverage
for contrast. Online: ``servecal simulate``'s ``online`` block (per-iteration P50 MAPE
and coverage of actual ≤ P99 + δ) for runs with ``truth=device, predictor=fitted``,
and the same runs on the oracle.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from servecal.costmodels.evaluate import evaluate
from servecal.sched import experiment as ex
from servecal.sched.device_truth import DeviceTruth
from servecal.sched.fitted_table import fitted_predictor, probe_points
from servecal.sched.policies.registry import PolicySpec

HELD_OUT_SEED = 1616
RUNS = (  # workload, policy, rate (req/s), TPOT SLO (ms)
    ("mixed", "sloweave", 30.0, 25.0),
    ("mixed", "fixed-512", 30.0, 25.0),
    ("mixed", "sloweave", 60.0, 25.0),
    ("mixed", "sloweave", 45.0, 10.0),
    ("tenants", "sloweave", 30.0, 25.0),
)
PREDICTORS = ("fitted", "fitted-grid", "oracle")
COLUMNS = ["n_decode", "chunk", "ctx", "prefix"]


#: Held-out shapes: fitted_table.probe_points up to these (what schedulers visit).
UNIFORM_UPPER = {"n_decode": 399, "chunk": 5999, "ctx": 11999, "prefix": 7999}


def visited_points(runs: list[pd.DataFrame], rng: np.random.Generator, size: int) -> pd.DataFrame:
    it = pd.concat([r[COLUMNS] for r in runs], ignore_index=True)
    it = it.iloc[rng.choice(len(it), size=min(size, len(it)), replace=False)]
    it["ctx"] = it["ctx"].round()  # samples carry integer shapes
    return it.astype({"ctx": int, "prefix": int}).drop_duplicates().reset_index(drop=True)


def offline(name: str, truth: DeviceTruth, points: pd.DataFrame, rng: np.random.Generator):
    rows = truth.draw(points, 20, rng)
    cols = [points[c].to_numpy(dtype=float) for c in COLUMNS]
    exact = truth.median(*cols)
    rcols = [rows[c].to_numpy(dtype=float) for c in COLUMNS]
    for predictor in ("fitted", "fitted-grid"):
        table = fitted_predictor(truth, predictor)
        m = evaluate(table, rows)
        err = np.abs(np.asarray(table.predict(*cols), dtype=float) - exact) / exact
        print(
            f"  {name:8} {predictor:11} {len(points):>6} {m['p50_mape']:>9.2%} {err.mean():>9.2%} "
            f"{np.percentile(err, 99):>8.2%} {m['p99_coverage']:>9.2%} {m['tightness']:>7.1%} "
            f"{m['out_of_domain']:>4}"
        )
    o_cov = float(np.mean(rows["ms"].to_numpy() <= truth.oracle().predict(*rcols, q=0.99)))
    print(f"  {name:8} {'oracle':11} {len(points):>6} {'':>9} {0:>9.2%} {0:>8.2%} {o_cov:>9.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2000, help="held-out shapes per set")
    parser.add_argument("--requests", type=int, default=2000, help="requests per online run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per online run")
    args = parser.parse_args()
    truth = DeviceTruth.load()
    t0 = time.time()
    print(f"truth: {truth}")
    for name in ("fitted", "fitted-grid"):
        table = fitted_predictor(truth, name)
        print(f"{name}: {table}, margin rho {table.margin_info.rho:.4f}")
    print(f"  5-fold validation on grid points: {table.validation}")

    print("\nOnline: truth=device, mean over seeds")
    print(
        f"  {'workload':8} {'policy':10} {'rate':>5} {'TPOT':>5} {'predictor':11} {'iters':>7} "
        f"{'P50 MAPE':>9} {'P99+d cov':>9} {'attain':>7} {'TPOT att':>8}"
    )
    visited = []
    for workload, policy, rate, tpot in RUNS:
        for predictor in PREDICTORS:
            spec = ex.RunSpec(
                workload=workload, policy=PolicySpec.parse(policy), tpot_slo_ms=tpot, rate=rate,
                n_requests=args.requests, seeds=tuple(range(args.seeds)),
                truth="device", predictor=predictor,
            )  # fmt: skip
            runs = [ex.run(spec, s) for s in spec.seeds]
            sums = [ex.summarize(spec, r) for r in runs]
            if predictor == "fitted":
                visited += [r.iterations for r in runs]
            print(
                f"  {workload:8} {policy:10} {rate:>5g} {tpot:>5g} {predictor:11} "
                f"{int(np.mean([len(r.iterations) for r in runs])):>7} "
                f"{np.mean([s['online']['p50_mape'] for s in sums]):>9.2%} "
                f"{np.mean([s['online']['p99_coverage'] for s in sums]):>9.2%} "
                f"{np.mean([s['attainment'] for s in sums]):>7.1%} "
                f"{np.mean([s['tpot_attainment'] for s in sums]):>8.1%}"
            )

    rng = np.random.default_rng(HELD_OUT_SEED)
    print("\nOffline, held-out shapes x 20 draws (seed 1616)")
    print(
        f"  {'set':8} {'predictor':11} {'points':>6} {'MAPE(med)':>9} {'MAPE(ex)':>9} "
        f"{'P99 err':>8} {'P99+d cov':>9} {'tight':>7} {'OOD':>4}"
    )
    offline("visited", truth, visited_points(visited, rng, args.points), rng)
    offline("uniform", truth, probe_points(rng, args.points, UNIFORM_UPPER), rng)
    load = os.getloadavg()
    print(
        f"\n{time.time() - t0:.0f} s; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
