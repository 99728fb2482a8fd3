"""Piecewise physics-shaped quantile regression: knees and tile steps in the token costs.

The ``linear`` model (:mod:`physics`) prices every token the same, so it cannot bend
where a kernel turns from memory-bound to compute-bound, nor jump where a kernel
starts another tile. This model keeps its launch and attention terms and replaces
the per-token terms by monotone piecewise-linear costs, plus tile counts::

    T_q(n, c, ctx, p) = b0 + b1·1[n>0] + b2·1[c>0]
                        + Σ_j s_j·seg_j(n)          decode tokens, one slope per segment
                        + b3·n·ctx                  decode attention over the KV
                        + Σ_j r_j·seg_j(c)          prefill tokens (and the chunk's own
                                                    causal attention: a convex bend)
                        + b4·c·p                    prefill attention over the prefix
                        + Σ_T t_T·⌈c / T⌉           a step per started tile, T in TILES

``seg_j(x) = clip(x − k_j, 0, k_{j+1} − k_j)`` is the part of ``x`` inside segment
``j`` (the last one unbounded), so ``s_j`` is the slope there. Every coefficient is
``>= 0`` and every term non-decreasing in every input: the model is monotone by
construction, and the slopes may rise (memory-bound then compute-bound: a knee) or
fall. Knots are quantiles of the training data's own values on each axis, never
of a known truth. One exact linear programme per quantile minimises the pinball
loss (:func:`physics.pinball_lp`); quantiles other than the median borrow the
median's shape (see :class:`PiecewiseQuantileRegressor`).

The surface has kinks at the knots and jumps just past every tile multiple, which
a grid interpolates correctly only if they are grid values: :meth:`breakpoints`
lists them and the compiler adds them to the table's axes.
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
    point_quantile,
    subsample,
)
from servecal.costmodels.physics import TERMS, physics_design, pinball_lp

#: Tile sizes (chunk tokens) whose started tiles may each add a fixed cost: the
#: token tiles of GEMM and attention kernels.
TILES = (64, 128, 256)
#: A tile step smaller than this share of the median iteration gets no grid values.
STEP_RESOLUTION = 0.002
#: Segments of the piecewise-linear token cost per axis (fewer with fewer values).
DECODE_SEGMENTS = 6
PREFILL_SEGMENTS = 12


def segment_knots(values: np.ndarray, segments: int) -> np.ndarray:
    """Knots ``0 = k_0 < k_1 < ...``: quantiles of the distinct positive ``values``.

    With ``segments + 1`` or fewer distinct positive values, every value but the
    largest is a knot (the cost is then linear between measured values).
    """
    positive = np.unique(np.asarray(values, dtype=float))
    positive = positive[positive > 0]
    if positive.size <= 1:
        return np.zeros(1)
    if positive.size <= segments + 1:
        inner = positive[:-1]
    else:
        inner = np.quantile(positive, np.linspace(0.0, 1.0, segments + 1)[:-1], method="lower")
    return np.unique(np.concatenate([[0.0], np.round(inner)]))


def segment_columns(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """``seg_j(x)`` for every segment (columns); the last segment is unbounded."""
    upper = np.append(knots[1:], np.inf)
    return np.clip(x[:, None] - knots[None, :], 0.0, upper - knots)


class PiecewiseQuantileRegressor(QuantileRegressorMixin, BaseEstimator):
    """Monotone piecewise physics model (a scikit-learn regressor).

    The quantile nearest 0.5 (the *anchor*, normally the median) is fitted on the
    full design above. Every other quantile is fitted on the ``linear`` model's seven
    terms plus the anchor's prediction as one more non-negative term
    (``anchor_shape``): the tail follows the median's knees and steps, with eight
    coefficients instead of the median's two dozen, because a tail quantile rests
    on few rows (P99: the top 1%) and a full design fitted to them overfits (its
    out-of-fold P99 pinball loss was up to 6% worse than ``linear``'s on known
    truths, docs/results/2026-12-01-model-choice.md).

    ``max_rows`` caps the LP size: larger inputs are subsampled, drawn with
    ``random_state`` (see :func:`~servecal.costmodels.estimator.subsample`).
    """

    #: Along these axes every quantile is affine (for fixed other inputs), so a grid
    #: needs only their first and last values to reproduce the model exactly.
    affine_axes = ("ctx", "prefix")

    def __init__(
        self,
        quantiles: Sequence[float] = (0.5, 0.99),
        decode_segments: int = DECODE_SEGMENTS,
        prefill_segments: int = PREFILL_SEGMENTS,
        tiles: Sequence[int] = TILES,
        max_rows: int = 20000,
        random_state: RandomState = None,
    ) -> None:
        self.quantiles = quantiles
        self.decode_segments = decode_segments
        self.prefill_segments = prefill_segments
        self.tiles = tiles
        self.max_rows = max_rows
        self.random_state = random_state

    def _design(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        n, c, ctx, p = X[:, 0], X[:, 1], X[:, 2], X[:, 3]
        return np.column_stack(
            [
                np.ones_like(n),
                n > 0,
                c > 0,
                segment_columns(n, self.decode_knots_),
                n * ctx,
                segment_columns(c, self.prefill_knots_),
                c * p,
                *(np.ceil(c / t) for t in self.tiles),
            ]
        ).astype(float)

    def _tail_design(self, X: np.ndarray, anchor: np.ndarray) -> np.ndarray:
        return np.column_stack([physics_design(X), anchor])

    def terms(self) -> list[str]:
        """Names of the anchor's design columns, in order."""

        def segs(name: str, knots: np.ndarray) -> list[str]:
            ends = [*(f"{k:g}" for k in knots[1:]), "inf"]
            return [f"{name}[{lo:g},{hi})" for lo, hi in zip(knots, ends, strict=True)]

        return [
            "overhead",
            "decode_launch",
            "prefill_launch",
            *segs("per_decode_token", self.decode_knots_),
            "decode_attention",
            *segs("per_prefill_token", self.prefill_knots_),
            "prefix_attention",
            *(f"per_tile_{t}" for t in self.tiles),
        ]

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> PiecewiseQuantileRegressor:
        X, y, w = check_fit_input(self, X, y, sample_weight)
        self.decode_knots_ = segment_knots(X[:, 0], self.decode_segments)
        self.prefill_knots_ = segment_knots(X[:, 1], self.prefill_segments)
        self.chunk_max_ = float(X[:, 1].max())
        keep = subsample(X.shape[0], self.max_rows, self.random_state)
        if keep is not None:
            X, y, w = X[keep], y[keep], None if w is None else w[keep]
        self.anchor_ = point_quantile(self.quantiles)
        self.coef_ = pinball_lp(self._design(X), y, self.anchor_, w)
        self.typical_ms_ = float(np.median(y))
        B = self._tail_design(X, self._design(X) @ self.coef_)
        self.tail_coef_ = {
            float(q): pinball_lp(B, y, float(q), w) for q in self.quantiles if q != self.anchor_
        }
        return self

    def predict_quantiles(self, X: Any) -> dict[float, np.ndarray]:
        """Every fitted quantile's prediction (ms), keyed by quantile."""
        X = check_predict_input(self, X)
        anchor = self._design(X) @ self.coef_
        out = {self.anchor_: anchor}
        if self.tail_coef_:
            B = self._tail_design(X, anchor)
            out.update({q: B @ b for q, b in self.tail_coef_.items()})
        return dict(sorted(out.items()))

    def breakpoints(self) -> dict[str, list[int]]:
        """Axis values where the fitted surface bends or jumps (for the table's grid):
        0 and 1 (the launch terms), the knots, and for every tile with a cost the last
        token of each tile and the first of the next, within the data's chunk range
        (steps below :data:`STEP_RESOLUTION` of the median time are left to the grid
        to smooth: fitted noise, not worth a hundred grid values)."""
        chunk = {0, 1, *self.prefill_knots_.astype(int).tolist()}  # 1: the launch step
        first_tile = len(self.terms()) - len(self.tiles)
        for k, tile in enumerate(self.tiles):
            if self.coef_[first_tile + k] >= STEP_RESOLUTION * self.typical_ms_:
                ends = np.arange(tile, self.chunk_max_, tile, dtype=int)
                chunk.update(ends.tolist())
                chunk.update((ends + 1).tolist())
        return {
            "n_decode": sorted({0, 1, *self.decode_knots_.astype(int).tolist()}),
            "chunk": sorted(chunk),
        }

    def describe(self) -> dict[str, dict[str, float]]:
        """Fitted coefficients by quantile and term (ms per unit of the term; the tail
        quantiles' ``anchor_shape`` is a factor on the anchor quantile's prediction)."""
        out = {repr(self.anchor_): dict(zip(self.terms(), map(float, self.coef_), strict=True))}
        for q, b in self.tail_coef_.items():
            out[repr(q)] = dict(zip([*TERMS, "anchor_shape"], map(float, b), strict=True))
        return dict(sorted(out.items(), key=lambda kv: float(kv[0])))
