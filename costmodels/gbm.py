"""Gradient-boosted quantile model: one LightGBM ``objective="quantile"`` per quantile.

LightGBM refuses monotone constraints with the quantile objective, so its raw
predictions are not monotone; the table compiler projects them (grid.make_monotone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from servecal.costmodels.estimator import (
    QuantileRegressorMixin,
    check_fit_input,
    check_predict_input,
)


class GBMQuantileRegressor(QuantileRegressorMixin, BaseEstimator):
    """LightGBM quantile regressors (a scikit-learn regressor).

    ``n_jobs`` defaults to 1: these fits are small, and LightGBM's OpenMP threads spin
    badly on a busy machine (75x slower with 2 threads on a loaded 2-core host).
    """

    def __init__(
        self,
        quantiles: Sequence[float] = (0.5, 0.99),
        n_estimators: int = 200,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        random_state: int | None = 0,
        n_jobs: int = 1,
    ) -> None:
        self.quantiles = quantiles
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> GBMQuantileRegressor:
        from lightgbm import LGBMRegressor

        X, y, w = check_fit_input(self, X, y, sample_weight)
        self.models_ = {}
        for q in self.quantiles:
            model = LGBMRegressor(
                objective="quantile",
                alpha=float(q),
                n_estimators=self.n_estimators,
                learning_rate=self.learning_rate,
                num_leaves=self.num_leaves,
                min_child_samples=self.min_child_samples,
                random_state=self.random_state,
                n_jobs=self.n_jobs,
                verbose=-1,
            )
            self.models_[float(q)] = model.fit(X, y, sample_weight=w)
        return self

    def predict_quantiles(self, X: Any) -> dict[float, np.ndarray]:
        """Every fitted quantile's prediction (ms, clipped at 0), keyed by quantile."""
        X = check_predict_input(self, X)
        return {q: np.maximum(m.predict(X), 0.0) for q, m in self.models_.items()}
