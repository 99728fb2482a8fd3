"""Physics-shaped quantile regression: non-negative terms fitted per quantile.

    T_q(n, c, ctx, p) = b0 + b1·1[n>0] + b2·1[c>0] + b3·n + b4·n·ctx
                        + b5·c + b6·c·(p + c/2),      every b >= 0

(fixed overhead, decode/prefill launch, per-decode-token, decode attention over the
KV, per-prefill-token, prefill attention over prefix and the causal half of the
chunk). Each term is non-decreasing in every input, so with ``b >= 0`` the model is
monotone by construction and extrapolates sanely. One linear programme per quantile
minimises the pinball loss (HiGHS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from servecal.costmodels.estimator import (
    QuantileRegressorMixin,
    RandomState,
    check_fit_input,
    check_predict_input,
    subsample,
)

TERMS = (
    "overhead",
    "decode_launch",
    "prefill_launch",
    "per_decode_token",
    "decode_attention",
    "per_prefill_token",
    "prefill_attention",
)


def physics_design(X: np.ndarray) -> np.ndarray:
    """Design matrix of :data:`TERMS` from rows of (n_decode, chunk, ctx, prefix)."""
    X = np.asarray(X, dtype=float)
    n, c, ctx, p = X[:, 0], X[:, 1], X[:, 2], X[:, 3]
    return np.column_stack(
        [np.ones_like(n), n > 0, c > 0, n, n * ctx, c, c * (p + c / 2.0)]
    ).astype(float)


def pinball_lp(
    A: np.ndarray, y: np.ndarray, q: float, sample_weight: np.ndarray | None = None
) -> np.ndarray:
    """Non-negative ``b`` minimising the ``q`` pinball loss of ``y - A b`` (exact LP),
    each row's loss weighted by ``sample_weight`` (None: all 1).

    Solved in its dual form, ``max yᵀd  s.t.  Aᵀd <= 0,  w(q-1) <= d <= wq``: one
    constraint per term instead of one per row, so HiGHS takes a fraction of a second
    on thousands of rows; ``b`` is read off the constraint multipliers.
    """
    from scipy.optimize import linprog

    col_scale = np.abs(A).max(axis=0)
    absent = col_scale == 0  # a term that never occurs (e.g. ctx always 0): b = 0
    col_scale[absent] = 1.0
    y_scale = float(np.median(np.abs(y))) or 1.0
    As, ys = A / col_scale, y / y_scale
    if sample_weight is None:
        bounds: Any = (q - 1.0, q)
    else:
        w = np.asarray(sample_weight, dtype=float)
        bounds = np.column_stack([w * (q - 1.0), w * q])
    res = linprog(-ys, A_ub=As.T, b_ub=np.zeros(As.shape[1]), bounds=bounds, method="highs")
    if not res.success:
        raise ValueError(f"quantile regression at q={q} failed: {res.message}")
    b = -np.asarray(res.ineqlin.marginals) / col_scale * y_scale
    b[absent] = 0.0
    return np.maximum(b, 0.0)


class PhysicsQuantileRegressor(QuantileRegressorMixin, BaseEstimator):
    """One non-negative physics fit per quantile (a scikit-learn regressor).

    ``max_rows`` caps the LP size: larger inputs are subsampled, drawn with
    ``random_state`` (see :func:`~servecal.costmodels.estimator.subsample`).
    """

    #: Along these axes every quantile is affine (for fixed other inputs), so a grid
    #: needs only their first and last values to reproduce the model exactly.
    affine_axes = ("ctx", "prefix")

    def __init__(
        self,
        quantiles: Sequence[float] = (0.5, 0.99),
        max_rows: int = 20000,
        random_state: RandomState = None,
    ) -> None:
        self.quantiles = quantiles
        self.max_rows = max_rows
        self.random_state = random_state

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> PhysicsQuantileRegressor:
        X, y, w = check_fit_input(self, X, y, sample_weight)
        A = physics_design(X)
        keep = subsample(A.shape[0], self.max_rows, self.random_state)
        if keep is not None:
            A, y, w = A[keep], y[keep], None if w is None else w[keep]
        self.coef_ = {float(q): pinball_lp(A, y, float(q), w) for q in self.quantiles}
        return self

    def predict_quantiles(self, X: Any) -> dict[float, np.ndarray]:
        """Every fitted quantile's prediction (ms), keyed by quantile."""
        A = physics_design(check_predict_input(self, X))
        return {q: A @ b for q, b in self.coef_.items()}

    def breakpoints(self) -> dict[str, list[int]]:
        """Axis values the table's grid needs to reproduce the model: the launch terms
        jump from 0 to 1 decode / chunk token (between them a grid would ramp the
        launch cost in over its first interval)."""
        return {"n_decode": [0, 1], "chunk": [0, 1]}

    def describe(self) -> dict[str, dict[str, float]]:
        """Fitted coefficients by quantile and term (ms per unit of the term)."""
        return {
            repr(q): {t: float(v) for t, v in zip(TERMS, b, strict=True)}
            for q, b in self.coef_.items()
        }
