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

import numpy as np

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


def pinball_lp(A: np.ndarray, y: np.ndarray, q: float) -> np.ndarray:
    """Non-negative ``b`` minimising the ``q`` pinball loss of ``y - A b`` (exact LP)."""
    from scipy import sparse
    from scipy.optimize import linprog

    col_scale = np.abs(A).max(axis=0)
    col_scale[col_scale == 0] = 1.0  # an absent term (e.g. ctx always 0) keeps b = 0
    y_scale = float(np.median(np.abs(y))) or 1.0
    As, ys = A / col_scale, y / y_scale
    m, k = As.shape
    eye = sparse.identity(m, format="csr")
    a_eq = sparse.hstack([sparse.csr_matrix(As), eye, -eye], format="csr")
    cost = np.concatenate([np.zeros(k), np.full(m, q), np.full(m, 1.0 - q)])
    res = linprog(cost, A_eq=a_eq, b_eq=ys, bounds=(0, None), method="highs")
    if not res.success:
        raise ValueError(f"quantile regression at q={q} failed: {res.message}")
    b = res.x[:k] / col_scale * y_scale
    b[np.abs(A).max(axis=0) == 0] = 0.0
    return np.maximum(b, 0.0)


class PhysicsQuantileRegressor:
    """One non-negative physics fit per quantile (scikit-learn estimator contract).

    ``max_rows`` caps the LP size: larger inputs are subsampled with ``rng``.
    """

    def __init__(
        self,
        quantiles: Sequence[float] = (0.5, 0.99),
        max_rows: int = 8000,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.quantiles = quantiles
        self.max_rows = max_rows
        self.rng = rng

    def fit(self, X: np.ndarray, y: np.ndarray) -> PhysicsQuantileRegressor:
        A, y = physics_design(X), np.asarray(y, dtype=float)
        if A.shape[0] > self.max_rows:
            rng = self.rng if self.rng is not None else np.random.default_rng(0)
            keep = rng.choice(A.shape[0], size=self.max_rows, replace=False)
            A, y = A[keep], y[keep]
        self.coef_ = {float(q): pinball_lp(A, y, float(q)) for q in self.quantiles}
        return self

    def predict_quantiles(self, X: np.ndarray) -> dict[float, np.ndarray]:
        A = physics_design(X)
        return {q: A @ b for q, b in self.coef_.items()}

    def describe(self) -> dict[str, dict[str, float]]:
        """Fitted coefficients by quantile and term (ms per unit of the term)."""
        return {
            repr(q): {t: float(v) for t, v in zip(TERMS, b, strict=True)}
            for q, b in self.coef_.items()
        }
