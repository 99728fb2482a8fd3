"""A fitted candidate compiled onto a grid, and that compilation as an estimator.

Cross-validation must score what the shipped table would answer, not the raw model:
the grid (with the model's breakpoints), filled holes, the monotone projection and
the uncrossing all change the numbers. :class:`CompiledTableRegressor` wraps a
candidate so that ``fit`` runs all of it and ``predict_table`` answers through a
:class:`~servecal.costmodels.table.CostTable`, so scikit-learn's ``cross_val_predict``
gives out-of-fold predictions of the compiled table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone

from servecal.costmodels.estimator import point_quantile
from servecal.costmodels.grid import (
    fill_holes,
    grid_features,
    grid_shape,
    make_monotone,
    settle_empty_iteration,
    uncross,
)
from servecal.costmodels.table import AXES, CostTable


def compile_quantiles(model: Any, axes: Mapping[str, Sequence[int]]) -> dict[float, np.ndarray]:
    """Every quantile on the grid: holes filled, monotone on every axis, uncrossed.

    LightGBM refuses monotone constraints with its quantile objective, so monotonicity
    is imposed here, on the grid, for every model alike; the conformal margin is
    computed on these projected values (never on the raw model)."""
    shape = grid_shape(axes)
    raw = model.predict_quantiles(grid_features(axes))
    return uncross(
        {
            q: make_monotone(settle_empty_iteration(fill_holes(v.reshape(shape), axes), axes))
            for q, v in raw.items()
        }
    )


def grid_for(
    model: Any, axes: Mapping[str, Sequence[int]], keep: Collection[str] = ()
) -> dict[str, list[int]]:
    """The grid a fitted model compiles onto: ``axes``, reduced to their two ends along
    the model's ``affine_axes`` (multilinear interpolation is exact there) unless they
    are in ``keep`` (axes the user gave: a table read with the ``round_up`` rule needs
    them), plus its ``breakpoints`` inside them (where its surface bends or jumps),
    so that interpolating the grid reproduces the model."""
    extra = model.breakpoints() if hasattr(model, "breakpoints") else {}
    affine = set(getattr(model, "affine_axes", ())) - set(keep)
    out = {}
    for a in AXES:
        lo, hi = axes[a][0], axes[a][-1]
        base = (lo, hi) if a in affine else axes[a]
        out[a] = sorted({*base, *(int(v) for v in extra.get(a, ()) if lo <= v <= hi)})
    return out


class CompiledTableRegressor(RegressorMixin, BaseEstimator):
    """``model`` fitted, then compiled onto ``axes`` (plus its breakpoints; axes in
    ``keep`` are never reduced) into a bare cost table, as ``servecal fit`` ships it.

    ``predict`` answers the quantile nearest 0.5, or with ``outputs="table"`` what
    :meth:`predict_table` answers (``cross_val_predict`` calls only ``predict``).

    ``on_fit`` (if given) is called with the number of training rows before each fit:
    how ``fit`` reports progress through ``cross_val_predict``.
    """

    def __init__(
        self,
        model: Any = None,
        axes: Mapping[str, Sequence[int]] | None = None,
        keep: Collection[str] = (),
        on_fit: Callable[[int], None] | None = None,
        outputs: str = "median",
    ) -> None:
        self.model = model
        self.axes = axes
        self.keep = keep
        self.on_fit = on_fit
        self.outputs = outputs

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> CompiledTableRegressor:
        if self.on_fit is not None:
            self.on_fit(len(y))
        self.model_ = clone(self.model).fit(X, y, sample_weight=sample_weight)
        self.grid_ = grid_for(self.model_, self.axes, self.keep)
        self.values_ = compile_quantiles(self.model_, self.grid_)
        self.table_ = CostTable(axes=self.grid_, quantiles=self.values_)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The table's quantile nearest 0.5 (normally the median), in ms, or with
        ``outputs="table"`` every quantile and the clamped flag (:meth:`predict_table`)."""
        if self.outputs == "table":
            return self.predict_table(X)
        X = np.asarray(X, dtype=float)
        q = point_quantile(self.table_.quantiles)
        return self.table_.lookup(q, *(X[:, k] for k in range(X.shape[1])))[0]

    def predict_table(self, X: Any) -> np.ndarray:
        """Per row: the table's value of each quantile (ascending), then 1.0 where the
        row lies outside the grid on some axis (clamped) and 0.0 elsewhere."""
        X = np.asarray(X, dtype=float)
        cols = [X[:, k] for k in range(X.shape[1])]
        out = np.empty((X.shape[0], len(self.table_.quantiles) + 1))
        clamped = np.zeros(X.shape[0], dtype=bool)
        for j, q in enumerate(sorted(self.table_.quantiles)):
            out[:, j], off_grid = self.table_.lookup(q, *cols)
            clamped |= off_grid
        out[:, -1] = clamped
        return out
