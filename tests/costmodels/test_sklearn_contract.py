"""Every candidate model keeps scikit-learn's estimator contract, and fit's folds are
scikit-learn's: GroupKFold over grid points, predictions by cross_val_predict."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone, is_regressor
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from servecal.costmodels.candidates import MODELS, make_model
from servecal.costmodels.compiled import CompiledTableRegressor, compile_quantiles, grid_for
from servecal.costmodels.crossval import out_of_fold, point_folds
from servecal.costmodels.empirical import EmpiricalQuantileTable
from servecal.costmodels.gbm import GBMQuantileRegressor
from servecal.costmodels.physics import PhysicsQuantileRegressor
from servecal.costmodels.piecewise import PiecewiseQuantileRegressor
from servecal.costmodels.synthetic import SyntheticTruth, grid_points
from servecal.costmodels.table import CostTable

AXES = {"n_decode": [0, 1, 4, 16], "chunk": [0, 16, 64, 256], "ctx": [0, 512], "prefix": [0]}

#: The checks a cost model genuinely cannot pass, and why. Each of these feeds 5 to 30
#: generic features; a cost model's inputs are (n_decode, chunk[, ctx[, prefix]]).
WIDE_INPUT = "feeds more than the 4 features (n_decode, chunk, ctx, prefix) a cost model has"
EXPECTED_FAILURES = {
    "check_estimators_dtypes": WIDE_INPUT,
    "check_all_zero_sample_weights_error": WIDE_INPUT,
    "check_sample_weight_equivalence_on_dense_data": WIDE_INPUT,
    "check_dtype_object": WIDE_INPUT,
    "check_regressors_train": WIDE_INPUT,
    "check_regressor_data_not_an_array": WIDE_INPUT,
    "check_regressors_int": WIDE_INPUT,
    "check_fit2d_1sample": WIDE_INPUT,
}


def expected_failures(estimator: BaseEstimator) -> dict[str, str]:
    if isinstance(estimator, EmpiricalQuantileTable):
        # A lookup table answers NaN for a cell without rows (the compiler fills it).
        return {**EXPECTED_FAILURES, "check_pipeline_consistency": "NaN in empty cells"}
    return EXPECTED_FAILURES


@parametrize_with_checks(
    [
        PhysicsQuantileRegressor(),
        PiecewiseQuantileRegressor(),
        GBMQuantileRegressor(n_estimators=20),
        EmpiricalQuantileTable(AXES),
    ],
    expected_failed_checks=expected_failures,
)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)


def _samples(seed: int = 0, repeats: int = 8):
    rng = np.random.default_rng(seed)
    truth = SyntheticTruth(sigma=0.05)
    frame = truth.draw(grid_points(AXES["n_decode"], AXES["chunk"], AXES["ctx"]), repeats, rng)
    X = frame[["n_decode", "chunk", "ctx", "prefix"]].to_numpy(dtype=float)
    return frame, X, frame["ms"].to_numpy()


@pytest.mark.parametrize("kind", MODELS)
def test_every_candidate_is_a_regressor_that_clones_unfitted(kind: str) -> None:
    _, X, y = _samples()
    model = make_model(kind, AXES, (0.5, 0.99), seed=5)
    assert isinstance(model, BaseEstimator) and is_regressor(model)
    params = model.get_params()
    assert params["quantiles"] == (0.5, 0.99)
    assert params.get("random_state", 5) == 5  # the lookup table draws nothing
    with pytest.raises(NotFittedError):
        model.predict(X)
    fitted = model.fit(X, y)
    assert fitted is model
    learned = [a for a in vars(model) if a.endswith("_") and not a.startswith("_")]
    assert learned, "fit sets attributes ending in '_'"
    copy = clone(model)
    assert copy.get_params() == params
    assert not any(a.endswith("_") and not a.startswith("_") for a in vars(copy))
    # predict is the median of predict_quantiles, and score is R^2 on it
    np.testing.assert_array_equal(model.predict(X), model.predict_quantiles(X)[0.5])
    assert model.score(X, y) > 0.9


@pytest.mark.parametrize("estimator", [PhysicsQuantileRegressor(), PiecewiseQuantileRegressor()])
def test_whole_weights_count_as_repeated_rows(estimator: BaseEstimator) -> None:
    _, X, y = _samples(repeats=3)
    weights = np.random.default_rng(1).integers(0, 4, size=y.size)
    weighted = clone(estimator).fit(X, y, sample_weight=weights)
    repeated = clone(estimator).fit(np.repeat(X, weights, axis=0), np.repeat(y, weights))
    for q, values in weighted.predict_quantiles(X).items():
        np.testing.assert_allclose(values, repeated.predict_quantiles(X)[q], rtol=1e-6)


def test_random_state_picks_the_subsampled_rows() -> None:
    _, X, y = _samples(repeats=20)
    fit = lambda state: PhysicsQuantileRegressor(max_rows=100, random_state=state).fit(X, y)  # noqa: E731
    np.testing.assert_array_equal(fit(3).coef_[0.99], fit(3).coef_[0.99])
    assert not np.array_equal(fit(3).coef_[0.99], fit(4).coef_[0.99])
    rng = np.random.default_rng(3)  # a Generator is used as given: the same draws as seed 3
    np.testing.assert_array_equal(fit(rng).coef_[0.99], fit(3).coef_[0.99])


def test_ctx_and_prefix_may_be_left_out() -> None:
    _, X, y = _samples()
    X2, keep = X[:, :2], X[:, 2] == 0
    short = PhysicsQuantileRegressor(quantiles=(0.5,)).fit(X2[keep], y[keep])
    full = PhysicsQuantileRegressor(quantiles=(0.5,)).fit(X[keep], y[keep])
    np.testing.assert_allclose(short.predict(X2[keep]), full.predict(X[keep]))
    with pytest.raises(ValueError, match="1 feature"):
        PhysicsQuantileRegressor().fit(X[:, :1], y)


def test_group_k_fold_holds_out_whole_points_and_covers_every_row() -> None:
    ids = np.repeat(np.arange(23), 5)
    folds = point_folds(ids, 5, seed=2)
    assert len(folds.splits) == 5
    for fold, (train, test) in enumerate(folds.splits):
        assert not np.isin(ids[test], ids[train]).any()
        assert np.all(folds.folds[test] == fold)
    assert sorted(np.concatenate([test for _, test in folds.splits]).tolist()) == list(range(115))
    again = point_folds(ids, 5, seed=2)
    np.testing.assert_array_equal(again.folds, folds.folds)
    assert not np.array_equal(point_folds(ids, 5, seed=3).folds, folds.folds)


def test_out_of_fold_predictions_are_those_of_a_table_fitted_without_the_fold() -> None:
    frame, X, y = _samples()
    ids = frame.groupby(["n_decode", "chunk", "ctx", "prefix"]).ngroup().to_numpy()
    folds = point_folds(ids, 4, seed=0)
    compiled = CompiledTableRegressor(PhysicsQuantileRegressor(random_state=0), axes=AXES)
    oof = out_of_fold(compiled, X, y, folds, (0.5, 0.99))
    train, test = folds.splits[1]
    alone = PhysicsQuantileRegressor(random_state=0).fit(X[train], y[train])
    grid = grid_for(alone, AXES)
    table = CostTable(axes=grid, quantiles=compile_quantiles(alone, grid))
    for q in (0.5, 0.99):
        values, _ = table.lookup(q, *(X[test, k] for k in range(4)))
        np.testing.assert_array_equal(oof.predictions[q][test], values)
    assert oof.predictions[0.5].shape == y.shape and not oof.clamped.any()
