"""Does ``fit --family auto`` keep the model that predicts best? Known truths, held-out points.

For each truth shape (smooth; a tile staircase; a memory→compute knee, see
``servecal.costmodels.synthetic.shaped_truth``) and seed: draw ``--points``
scattered points x ``--repeats`` repeats (5% log-normal noise, 1% spikes of 2x) to
fit on and ``--test-points`` *other* points x 25 repeats to test on; fit every
candidate alone (``--model NAME``) and ``auto``; score each table on the test
points: pinball loss per quantile and its mean, P50 MAPE (per point, against the
median of its repeats), P99+δ coverage (per row), tightness ((P99+δ)/ms − 1), fit
time. Prints one block per truth (every seed, then means), and a verdict per
truth against the targets: auto's P50 MAPE <= 1.5%, coverage in [97.5%, 99.8%],
auto's mean pinball <= 1.1x the best candidate's, and auto's fit time <= the sum
of the candidates'.

    python benchmarks/model_choice.py [--seeds 3] [--points 400] [--repeats 25]
                                      [--test-points 200] [--shapes smooth,step,knee]
                                      [--tile-share 0.333]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from servecal.costmodels.evaluate import evaluate
from servecal.costmodels.fit import MODELS, fit_cost_table
from servecal.costmodels.synthetic import SHAPES, scattered_points, shaped_truth

TEST_REPEATS = 25
MAX_MAPE = 0.015
COVERAGE = (0.975, 0.998)
MAX_PINBALL_RATIO = 1.10


def run_one(
    shape: str, seed: int, points: int, repeats: int, test_points: int, tile_share: float
) -> dict:
    """Every candidate and auto on one truth and seed: test metrics and fit times."""
    rng = np.random.default_rng([seed, SHAPES.index(shape)])
    truth = shaped_truth(shape, rng, tile_share)
    train = truth.draw(scattered_points(points, rng), repeats, rng)
    test = truth.draw(scattered_points(test_points, rng), TEST_REPEATS, rng)
    rows: dict[str, Any] = {}
    for name in (*MODELS, "auto"):
        start = time.perf_counter()
        result = fit_cost_table(train, {}, model=name, seed=seed)
        seconds = time.perf_counter() - start
        m = evaluate(result.table, test)
        rows[name] = {
            "pinball": m["pinball"],
            "score": float(np.mean(list(m["pinball"].values()))),
            "mape": m["p50_mape"],
            "coverage": m["p99_coverage"],
            "tightness": m["tightness"],
            "seconds": seconds,
            "chosen": result.model,
        }
    detail = (
        f"tile {truth.prefill_tile}" if truth.prefill_tile else
        f"knee {truth.prefill_knee}" if truth.prefill_knee else "smooth"
    )  # fmt: skip
    return {"rows": rows, "detail": detail}


def print_block(shape: str, runs: list[dict], seeds: list[int]) -> bool:
    """One truth: a line per seed and candidate, the means, and the verdict."""
    qs = list(runs[0]["rows"]["auto"]["pinball"])
    head = "".join(f"{'pin q=' + repr(q):>12}" for q in qs)
    print(f"\n== truth: {shape} ==")
    print(f"{'seed':>5} {'model':<10}{head}{'mean':>9}{'MAPE':>8}{'cover':>8}{'tight':>8}"
          f"{'fit s':>8}  chosen")  # fmt: skip
    for seed, run in zip(seeds, runs, strict=True):
        print(f"  ({run['detail']})")
        for name, r in run["rows"].items():
            pins = "".join(f"{r['pinball'][q]:12.4f}" for q in qs)
            mark = f"-> {r['chosen']}" if name == "auto" else ""
            print(
                f"{seed:>5} {name:<10}{pins}{r['score']:9.4f}{r['mape']:8.2%}"
                f"{r['coverage']:8.2%}{r['tightness']:8.1%}{r['seconds']:8.1f}  {mark}"
            )
    print("means over seeds:")
    for name in runs[0]["rows"]:
        rs = [run["rows"][name] for run in runs]
        pins = "".join(f"{np.mean([r['pinball'][q] for r in rs]):12.4f}" for q in qs)
        chosen = [r["chosen"] for r in rs]
        count = (
            ", ".join(f"{c} x{chosen.count(c)}" for c in sorted(set(chosen)))
            if name == "auto"
            else f"chosen {sum(run['rows']['auto']['chosen'] == name for run in runs)}/{len(runs)}"
        )
        print(
            f"{'all':>5} {name:<10}{pins}{np.mean([r['score'] for r in rs]):9.4f}"
            f"{np.mean([r['mape'] for r in rs]):8.2%}{np.mean([r['coverage'] for r in rs]):8.2%}"
            f"{np.mean([r['tightness'] for r in rs]):8.1%}"
            f"{np.mean([r['seconds'] for r in rs]):8.1f}  {count}"
        )
    ratios, mapes, covers, budget = [], [], [], []
    for run in runs:
        rows = run["rows"]
        best = min(rows[n]["score"] for n in MODELS)
        ratios.append(rows["auto"]["score"] / best)
        mapes.append(rows["auto"]["mape"])
        covers.append(rows["auto"]["coverage"])
        budget.append(rows["auto"]["seconds"] / sum(rows[n]["seconds"] for n in MODELS))
    ok = (
        max(mapes) <= MAX_MAPE
        and COVERAGE[0] <= min(covers)
        and max(covers) <= COVERAGE[1]
        and max(ratios) <= MAX_PINBALL_RATIO
    )
    print(
        f"verdict {shape}: auto P50 MAPE max {max(mapes):.2%} (<= {MAX_MAPE:.1%}), coverage "
        f"{min(covers):.2%}–{max(covers):.2%} (in {COVERAGE[0]:.1%}–{COVERAGE[1]:.1%}), "
        f"pinball / best candidate max {max(ratios):.3f} (<= {MAX_PINBALL_RATIO}), "
        f"auto time / sum of candidates' max {max(budget):.2f}: {'PASS' if ok else 'FAIL'}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--points", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--test-points", type=int, default=200)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument(
        "--tile-share", type=float, default=1 / 3, help="step: a tile's step / its tokens' cost"
    )
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    seeds = list(range(args.seeds))
    print(
        f"{args.points} scattered points x {args.repeats} repeats to fit, "
        f"{args.test_points} other points x {TEST_REPEATS} to test; seeds {seeds}; "
        f"tile share {args.tile_share:.3g}; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    verdicts = []
    for shape in shapes:
        runs = [
            run_one(shape, s, args.points, args.repeats, args.test_points, args.tile_share)
            for s in seeds
        ]
        verdicts.append(print_block(shape, runs, seeds))
    print(f"\nall truths: {'PASS' if all(verdicts) else 'FAIL'}; "
          f"load average at the end {os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
