"""``fit --model auto`` over many seeds: which model is kept, and its held-out figures.

The seed deals the points into folds, so the held-out metrics and the margin move
with it while the shipped quantiles do not. Run at two revisions to compare how
they fold (one JSON line per seed, then the mean ± sd of each figure):

    python benchmarks/fit_seeds.py SAMPLES [--seeds 20]
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections import Counter

import numpy as np

from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.samples import read_samples

FIGURES = ("score", "p50_mape", "p99_coverage", "tightness", "rho")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    frame = read_samples(args.samples).frame
    rows = []
    for seed in range(args.seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fit_cost_table(frame, {}, seed=seed)
        m = result.metrics
        margin = result.table.to_json()["margin"]
        row = {
            "seed": seed,
            "kind": result.model,
            "score": float(np.mean(list(m["pinball"].values()))),
            "p50_mape": m["p50_mape"],
            "p99_coverage": m["p99_coverage"],
            "tightness": m["tightness"],
            "rho": margin["rho"] if margin else float("nan"),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("kept:", dict(Counter(r["kind"] for r in rows)))
    for name in FIGURES:
        values = np.array([r[name] for r in rows], dtype=float)
        print(f"{name}: {values.mean():.4f} ± {values.std(ddof=1):.4f}")


if __name__ == "__main__":
    main()
