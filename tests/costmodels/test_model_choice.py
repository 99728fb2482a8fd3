"""``--family auto`` keeps the candidate that predicts best, on known truths it never saw.

Smaller than the benchmark (``benchmarks/model_choice.py``: 400 points, three seeds
per truth) to stay CI-fast: 200 scattered points x 25 repeats to fit, 100 other
points x 25 repeats to test, one seed per truth (a different one for each), and
the tile and the knee are drawn from the seed.
"""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels.evaluate import evaluate
from servecal.costmodels.fit import MODELS, fit_cost_table
from servecal.costmodels.synthetic import SHAPES, scattered_points, shaped_truth


def mean_pinball(metrics: dict) -> float:
    return float(np.mean(list(metrics["pinball"].values())))


@pytest.mark.parametrize(("shape", "seed"), [("smooth", 11), ("step", 12), ("knee", 13)])
def test_auto_predicts_held_out_points_as_well_as_the_best_candidate(shape: str, seed: int):
    rng = np.random.default_rng(seed)
    truth = shaped_truth(shape, rng)
    train = truth.draw(scattered_points(200, rng), 25, rng)
    test = truth.draw(scattered_points(100, rng), 25, rng)

    auto = fit_cost_table(train, {}, seed=seed)
    held_out = evaluate(auto.table, test)
    assert held_out["p50_mape"] <= 0.015, held_out
    assert 0.975 <= held_out["p99_coverage"] <= 0.998, held_out

    # Each candidate alone (2 folds: the shipped quantiles do not depend on the folds).
    alone = {
        name: fit_cost_table(train, {}, model=name, fold_share=0.5, seed=seed).table
        for name in MODELS
    }
    scores = {name: mean_pinball(evaluate(table, test)) for name, table in alone.items()}
    assert mean_pinball(held_out) <= 1.10 * min(scores.values()), (auto.model, scores)
    # auto ships the kept candidate's own table
    for q in auto.table.quantiles:
        np.testing.assert_array_equal(auto.table.values(q), alone[auto.model].values(q))

    selection = auto.table.model["selection"]
    assert [c["name"] for c in selection["candidates"]] == list(MODELS)
    assert all(
        c["fit_s"] > 0 and set(c["pinball"]) == {"0.5", "0.99"} for c in selection["candidates"]
    )


def test_the_shapes_are_what_they_say() -> None:
    rng = np.random.default_rng(0)
    step, knee = shaped_truth("step", rng), shaped_truth("knee", rng)
    n, ctx, p = np.zeros(3), np.zeros(3), np.zeros(3)
    t = step.prefill_tile
    jump = step.median(n, np.array([t - 1, t, t + 1.0]), ctx, p)
    assert jump[2] - jump[1] > 10 * (jump[1] - jump[0])  # the step is just past the tile
    k = knee.prefill_knee
    flat = knee.median(n, np.array([1.0, k / 2, k]), ctx, p)
    # memory-bound below the knee (only the chunk's own attention grows), then compute-bound
    assert flat[2] - flat[0] < 0.05 * (0.006 * k)
    beyond = knee.median(n[:1], np.array([2.0 * k]), ctx[:1], p[:1])[0]
    assert beyond - flat[2] > 0.9 * 0.006 * k
    assert set(SHAPES) == {"smooth", "step", "knee"}
    with pytest.raises(ValueError, match="unknown shape"):
        shaped_truth("wave", rng)
