"""Empirical quantile lookup: the quantiles of the measured rows in each grid cell.

A row belongs to the cell its query would be answered from (round up on every axis),
so for samples measured on the grid a cell is exactly one measured point. Cells
without rows predict NaN; :func:`servecal.costmodels.grid.fill_holes` fills them
when the table is compiled.

The median is the cell's own. A tail quantile from ~20 repeats is mostly the largest
repeat, so it is noisy; with ``pool_radius > 0`` it is the cell's median times the
quantile of the *ratios* ms / cell median pooled over the neighbouring cells (within
``pool_radius`` grid steps on every axis), assuming the tail's relative shape changes
smoothly over the grid. Pools never cross from 0 to > 0 on ``n_decode`` or ``chunk``
(no decode / no prefill is a different regime).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from servecal.costmodels.estimator import (
    QuantileRegressorMixin,
    check_fit_input,
    check_predict_input,
)
from servecal.costmodels.grid import cell_index, grid_shape
from servecal.costmodels.table import AXES


class EmpiricalQuantileTable(QuantileRegressorMixin, BaseEstimator):
    """Per-cell empirical quantiles (a scikit-learn regressor on the grid ``axes``).

    ``sample_weight`` must be whole numbers: a weight counts a row as that many
    repeats (a weighted tail quantile of ~20 repeats is not better defined than that).
    """

    def __init__(
        self,
        axes: Mapping[str, Sequence[int]],
        quantiles: Sequence[float] = (0.5, 0.99),
        min_rows: int = 1,
        pool_radius: int = 1,
    ) -> None:
        self.axes = axes
        self.quantiles = quantiles
        self.min_rows = min_rows
        self.pool_radius = pool_radius

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> EmpiricalQuantileTable:
        """``X``: rows of FEATURES; ``y``: measured ms (or J)."""
        X, y, w = check_fit_input(self, X, y, sample_weight)
        if w is not None:
            if not np.all(w == np.round(w)):
                raise ValueError("sample_weight: the lookup table takes whole repeat counts")
            X, y = np.repeat(X, w.astype(np.int64), axis=0), np.repeat(y, w.astype(np.int64))
        size = int(np.prod(grid_shape(self.axes)))
        cells = cell_index(self.axes, X)
        order = np.argsort(cells, kind="stable")
        cells, y = cells[order], y[order]
        starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
        groups = np.split(y, starts[1:])
        self.counts_ = np.zeros(size, dtype=np.int64)
        self.counts_[cells[starts]] = [g.size for g in groups]
        known = cells[starts][[g.size >= self.min_rows for g in groups]]
        kept = [g for g in groups if g.size >= self.min_rows]
        medians = np.array([np.median(g) for g in kept])
        ratios = _ratio_matrix(kept, medians)  # (cells, width), NaN-padded
        own = ratios[:-1]
        pooled = ratios[self._pools(known)] if self.pool_radius > 0 else own[:, None, :]
        pooled = pooled.reshape(len(kept), -1)
        self.values_ = {}
        for q in self.quantiles:
            vals = np.full(size, np.nan)
            source = own if q == 0.5 else pooled
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                vals[known] = np.nanquantile(source, q, axis=1) * medians
            self.values_[float(q)] = vals
        return self

    def predict_quantiles(self, X: Any) -> dict[float, np.ndarray]:
        """Every quantile of the cell each row falls in (NaN for a cell without rows)."""
        cells = cell_index(self.axes, check_predict_input(self, X))
        return {q: v[cells] for q, v in self.values_.items()}

    def _pools(self, known: np.ndarray) -> np.ndarray:
        """Row positions (into ``known``) of each cell's pool, shape (cells, offsets).

        Missing or other-regime neighbours point at a padding row of NaN (index -1 after
        :func:`_ratio_matrix` appends it).
        """
        shape = grid_shape(self.axes)
        idx = np.stack(np.unravel_index(known, shape), axis=1)
        lookup = np.full(shape, -1, dtype=np.int64)
        lookup[tuple(idx.T)] = np.arange(known.size)
        r = int(self.pool_radius)
        grid = np.meshgrid(*[np.arange(-r, r + 1)] * len(shape), indexing="ij")
        offsets = np.stack(grid, -1).reshape(-1, len(shape))
        pos = idx[:, None, :] + offsets[None, :, :]  # (cells, offsets, axes)
        inside = ((pos >= 0) & (pos < np.array(shape))).all(axis=2)
        for k, name in enumerate(AXES):  # no pooling across value 0 of n_decode / chunk
            if name in ("n_decode", "chunk") and self.axes[name][0] == 0:
                inside &= (pos[:, :, k] == 0) == (idx[:, None, k] == 0)
        clipped = np.clip(pos, 0, np.array(shape) - 1)
        members = lookup[tuple(np.moveaxis(clipped, 2, 0))]
        return np.where(inside, members, -1)


#: Each cell keeps at most this many ratios (evenly spaced order statistics beyond it),
#: so pooling stays small however many repeats a point has.
MAX_RATIOS = 100


def _ratio_matrix(groups: list[np.ndarray], medians: np.ndarray) -> np.ndarray:
    """ms / cell median per cell, NaN-padded rows, plus a final all-NaN padding row."""
    width = min(MAX_RATIOS, max(g.size for g in groups))
    out = np.full((len(groups) + 1, width), np.nan)
    for i, (g, m) in enumerate(zip(groups, medians, strict=True)):
        r = g / m
        if r.size > width:
            r = np.quantile(r, np.linspace(0.0, 1.0, width))
        out[i, : r.size] = r
    return out
