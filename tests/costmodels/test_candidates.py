"""The candidate models and the rule ``auto`` keeps one by."""

from __future__ import annotations

import numpy as np
import pytest

from servecal.costmodels.compiled import grid_for
from servecal.costmodels.fit import fit_cost_table
from servecal.costmodels.grid import MAX_CELLS, choose_axes
from servecal.costmodels.physics import PhysicsQuantileRegressor
from servecal.costmodels.piecewise import PiecewiseQuantileRegressor, segment_knots
from servecal.costmodels.select import Trial, choose
from servecal.costmodels.synthetic import SyntheticTruth, grid_points, scattered_points

FEATURES = ["n_decode", "chunk", "ctx", "prefix"]


def trial(name: str, losses: list[float], tightness: float | None = 0.2) -> Trial:
    """A scored candidate whose points lost ``losses`` (mean pinball, already / rows)."""
    point_loss = np.asarray(losses, dtype=float)
    total = float(point_loss.sum())
    metrics = {"pinball": {0.5: total, 0.99: total}, "tightness": tightness}
    return Trial(name, 1.0, metrics, point_loss=point_loss)


def test_a_clear_winner_is_kept_whatever_its_tightness() -> None:
    a = trial("a", [0.1] * 50, tightness=0.9)
    b = trial("b", [0.12] * 50, tightness=0.1)  # worse on every point: no tie
    kept, reason = choose([b, a])
    assert kept == "a" and "lowest out-of-fold pinball" in reason and "b " in reason


def test_a_tie_within_one_standard_error_goes_to_the_tighter() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.05, 0.15, 50)
    noisy = base + rng.normal(0, 0.02, 50)  # differences of both signs, mean ~0
    a = trial("a", base, tightness=0.30)
    b = trial("b", noisy + (base.sum() - noisy.sum()) / 50 + 1e-4, tightness=0.20)
    kept, reason = choose([a, b])
    assert b.score > a.score and kept == "b" and "tied" in reason and "20.00%" in reason


def test_skipped_candidates_are_named_and_nothing_scored_is_an_error() -> None:
    kept, reason = choose([trial("a", [0.1] * 5), Trial("p", 0.0, skipped="no knee")])
    assert kept == "a" and "skipped: p (no knee)" in reason
    with pytest.raises(ValueError, match="no candidate"):
        choose([Trial("p", 0.0, skipped="no knee")])


def test_piecewise_recovers_a_knee_and_a_staircase() -> None:
    """Noiseless: the knee and the tile steps are reproduced by the table it compiles
    (the steps land on grid values), where the linear model is off by several %."""
    truth = SyntheticTruth(prefill_knee=600, prefill_tile=256, tile_ms=0.5, sigma=0.0,
                           spike_prob=0.0)  # fmt: skip
    chunks = list(range(0, 3073, 48))
    frame = truth.draw(grid_points([0, 1, 8, 32, 64, 128], chunks), 1, np.random.default_rng(0))
    X = frame[FEATURES].to_numpy(float)
    model = PiecewiseQuantileRegressor(quantiles=(0.5,)).fit(X, frame.ms.to_numpy())
    coef = model.describe()["0.5"]
    assert coef["per_tile_256"] == pytest.approx(0.5, rel=0.05)
    assert all(v >= 0 for v in coef.values())
    axes = choose_axes({a: frame[a].to_numpy() for a in ("n_decode", "ctx", "prefix", "chunk")})
    grid = grid_for(model, axes)
    assert {256, 257, 512, 513} <= set(grid["chunk"])  # the steps are grid values
    steps = [100, 255, 256, 257, 300, 1000, 1023, 1024, 1025, 2049]  # knots off the knee
    knee = [560, 599, 601, 640]  # inside one segment: a knot is near, not on, the knee
    for chunks, tolerance in ((steps, 1e-6), (knee, 0.05)):
        query = np.array([[8, c, 0, 0] for c in chunks], dtype=float)
        truth_ms = truth.median(*query.T)
        error = np.abs(model.predict_quantiles(query)[0.5] / truth_ms - 1)
        assert np.max(error) < tolerance, (chunks, error)
    query = np.array([[8, c, 0, 0] for c in steps + knee], dtype=float)
    linear = PhysicsQuantileRegressor(quantiles=(0.5,)).fit(X, frame.ms.to_numpy())
    assert np.max(np.abs(linear.predict_quantiles(query)[0.5] / truth.median(*query.T) - 1)) > 0.1


def test_piecewise_tables_are_monotone_and_small_along_affine_axes() -> None:
    rng = np.random.default_rng(3)
    truth = SyntheticTruth(decode_attention=5e-6, prefill_attention=1e-7, prefill_knee=500)
    frame = truth.draw(scattered_points(150, rng), 8, rng)
    table = fit_cost_table(frame, {}, model="piecewise", seed=3).table
    assert len(table.axes["ctx"]) == 2 and len(table.axes["prefix"]) == 2  # ends only
    for q in table.quantiles:
        assert all((np.diff(table.values(q), axis=k) >= 0).all() for k in range(4))
    assert table.model["coefficients"]["0.99"]["anchor_shape"] > 0  # the tail follows P50
    ctx = [0, 1024, 4096, 8192]  # an axis the caller gives is kept (round_up needs it)
    given = fit_cost_table(frame, {}, model="piecewise", seed=3, grid={"ctx": ctx}).table
    assert list(given.axes["ctx"]) == ctx and len(given.axes["prefix"]) == 2


def test_segment_knots_come_from_the_data() -> None:
    assert segment_knots(np.array([0, 4, 8, 16]), 6).tolist() == [0, 4, 8]
    knots = segment_knots(np.arange(0, 1001), 4)
    assert knots.tolist() == [0, 1, 250, 500, 750]
    assert segment_knots(np.zeros(5), 4).tolist() == [0]


def test_scattered_designs_get_a_bounded_grid_and_given_axes_are_kept() -> None:
    rng = np.random.default_rng(0)
    points = scattered_points(400, rng)
    cols = {a: points[a].to_numpy() for a in FEATURES}
    axes = choose_axes(cols)
    assert np.prod([len(v) for v in axes.values()]) <= MAX_CELLS
    assert all(axes[a][0] == cols[a].min() and axes[a][-1] == cols[a].max() for a in FEATURES)
    given = choose_axes(cols, grid={"chunk": list(range(0, 3073, 16))})
    assert given["chunk"] == list(range(0, 3073, 16))
    regular = grid_points([0, 1, 8, 32], [0, 64, 512], ctx=[0, 1000], prefix=[0, 256])
    small = choose_axes({a: regular[a].to_numpy() for a in FEATURES})
    assert [len(small[a]) for a in FEATURES] == [4, 3, 2, 2]  # untouched
