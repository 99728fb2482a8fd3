"""Held-out P99+δ coverage and P50 MAPE of fitted tables on a known truth, by --holdout.

Truth: the docs/spec.md §1 formula x log-normal noise (σ = 0.05) with 0.3% spikes of 2x, on a
16 x 20 grid (319 points) x 20 repeats; one fit per seed with ``model="table"``.
Prints the mean coverage over seeds with its standard error, mean MAPE and tightness.

    python benchmarks/coverage_holdout.py [--seeds 40] [--holdouts 0.2,0.3,0.4]

With ``--samples FILE`` (a calibration's ``samples.parquet``) the same fit is
repeated on those measured rows with ``--seeds`` fold seeds instead (the auto model,
as ``servecal calibrate`` fits it): how much the held-out figures depend on which
points land in which fold.
"""

from __future__ import annotations

import argparse

import numpy as np

from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.synthetic import SyntheticTruth, grid_points

N_DECODE = [0, 1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128]
CHUNK = [0, 16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536,
         2048, 2560, 3072]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--holdouts", default="0.2,0.3,0.4")
    parser.add_argument("--samples", default=None, help="refit these measured samples")
    args = parser.parse_args()
    if args.samples:
        refit(args.samples, args.seeds, [float(h) for h in args.holdouts.split(",")])
        return
    points = grid_points(N_DECODE, CHUNK)
    truth = SyntheticTruth()
    print(f"{len(points)} points x 20 repeats, {args.seeds} seeds, model=table")
    for holdout in (float(h) for h in args.holdouts.split(",")):
        cov, mape, tight = [], [], []
        for seed in range(args.seeds):
            frame = truth.draw(points, repeats=20, rng=np.random.default_rng(seed))
            m = fit_cost_table(frame, {}, model="table", fold_share=holdout, seed=seed).metrics
            cov.append(m["p99_coverage"])
            mape.append(m["p50_mape"])
            tight.append(m["tightness"])
        se = np.std(cov, ddof=1) / np.sqrt(len(cov))
        print(
            f"holdout {holdout:.2f}: coverage {np.mean(cov):.2%} ± {se:.2%} (s.e.), "
            f"P50 MAPE {np.mean(mape):.2%}, tightness {np.mean(tight):.1%}"
        )


def refit(path: str, seeds: int, holdouts: list[float]) -> None:
    from servecal.costmodels.samples import read_samples

    data = read_samples(path)
    for holdout in holdouts:
        runs = [
            fit_cost_table(data.frame, dict(data.provenance), fold_share=holdout, seed=s).metrics
            for s in range(seeds)
        ]
        mape = [100 * m["p50_mape"] for m in runs]
        cov = [100 * m["p99_coverage"] for m in runs]
        print(
            f"{path}, holdout {holdout:.2f}, {seeds} fold seeds: P50 MAPE "
            f"{min(mape):.1f}–{max(mape):.1f}%, P99+δ coverage {min(cov):.1f}–{max(cov):.1f}%"
        )


if __name__ == "__main__":
    main()
