"""What every candidate cost model shares as a scikit-learn regressor.

A candidate is a :class:`~sklearn.base.BaseEstimator`: its hyper-parameters are
constructor arguments (so ``get_params``, ``set_params`` and ``clone`` work), ``fit``
learns attributes that end in ``_``, and it answers both ``predict(X)`` (the quantile
nearest the median, which is what ``RegressorMixin.score`` rates) and
``predict_quantiles(X) -> {q: values}`` (every tabled quantile, what a cost table
compiles). Rows of ``X`` are the four :data:`~servecal.costmodels.grid.FEATURES`
(n_decode, chunk, ctx, prefix); as in ``Predictor.predict``, ``ctx`` and ``prefix``
may be left out (two or three columns) and then count as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

#: Columns of ``X``: (n_decode, chunk, ctx, prefix); the last two may be left out.
N_FEATURES = 4
MIN_FEATURES = 2

RandomState = int | np.random.Generator | np.random.RandomState | None


def point_quantile(quantiles: Sequence[float]) -> float:
    """The tabled quantile nearest 0.5: what ``predict`` answers."""
    return min((float(q) for q in quantiles), key=lambda q: abs(q - 0.5))


def check_fit_input(
    estimator: Any, X: Any, y: Any, sample_weight: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validated float ``X`` (padded to four columns), ``y`` and ``sample_weight`` (None
    stays None, so an unweighted fit runs exactly the unweighted code)."""
    X, y = validate_data(estimator, X, y, dtype=np.float64, y_numeric=True)
    X = _four_columns(X)
    if sample_weight is not None:
        sample_weight = _check_sample_weight(sample_weight, X, ensure_non_negative=True)
    return X, np.asarray(y, dtype=float), sample_weight


def check_predict_input(estimator: Any, X: Any) -> np.ndarray:
    """Validated float ``X`` for a fitted ``estimator``."""
    check_is_fitted(estimator)
    return _four_columns(validate_data(estimator, X, dtype=np.float64, reset=False))


def _four_columns(X: np.ndarray) -> np.ndarray:
    """``X`` with the left-out ``ctx`` / ``prefix`` columns added as zeros."""
    if not MIN_FEATURES <= X.shape[1] <= N_FEATURES:
        raise ValueError(
            f"X has {X.shape[1]} feature(s); a cost model takes {MIN_FEATURES} to {N_FEATURES}"
            " (n_decode, chunk[, ctx[, prefix]])"
        )
    if X.shape[1] == N_FEATURES:
        return X
    return np.hstack([X, np.zeros((X.shape[0], N_FEATURES - X.shape[1]))])


def subsample(rows: int, max_rows: int, random_state: RandomState) -> np.ndarray | None:
    """Indices of ``max_rows`` rows drawn without replacement, or None when all fit.

    An int seeds a numpy ``Generator`` (``default_rng``); a ``Generator`` or a legacy
    ``RandomState`` is used as given; None draws fresh entropy."""
    if rows <= max_rows:
        return None
    if isinstance(random_state, np.random.Generator | np.random.RandomState):
        rng = random_state
    else:
        rng = np.random.default_rng(random_state)
    return rng.choice(rows, size=max_rows, replace=False)


class QuantileRegressorMixin(RegressorMixin):
    """``predict`` as the quantile nearest the median of ``predict_quantiles``."""

    def predict(self, X: Any) -> np.ndarray:
        """The predicted quantile nearest 0.5 (normally the median), in ms."""
        return self.predict_quantiles(X)[point_quantile(self.quantiles)]
