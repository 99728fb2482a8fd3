"""Empirical quantile lookup: the quantiles of the measured rows in each grid cell.

A row belongs to the cell its query would be answered from (round up on every axis),
so for samples measured on the grid a cell is exactly one measured point. Cells
without rows predict NaN; :func:`servecal.costmodels.grid.fill_holes` fills them
when the table is compiled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from servecal.costmodels.grid import cell_index, grid_shape


class EmpiricalQuantileTable:
    """Per-cell empirical quantiles (scikit-learn estimator contract)."""

    def __init__(
        self,
        axes: Mapping[str, Sequence[int]],
        quantiles: Sequence[float] = (0.5, 0.99),
        min_rows: int = 1,
    ) -> None:
        self.axes = axes
        self.quantiles = quantiles
        self.min_rows = min_rows

    def fit(self, X: np.ndarray, y: np.ndarray) -> EmpiricalQuantileTable:
        """``X``: rows of FEATURES; ``y``: measured ms (or J)."""
        size = int(np.prod(grid_shape(self.axes)))
        cells = cell_index(self.axes, np.asarray(X, dtype=float))
        y = np.asarray(y, dtype=float)
        order = np.argsort(cells, kind="stable")
        cells, y = cells[order], y[order]
        starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
        groups = np.split(y, starts[1:])
        self.counts_ = np.zeros(size, dtype=np.int64)
        self.counts_[cells[starts]] = [g.size for g in groups]
        self.values_ = {}
        for q in self.quantiles:
            vals = np.full(size, np.nan)
            vals[cells[starts]] = [np.quantile(g, q) for g in groups]
            vals[self.counts_ < self.min_rows] = np.nan
            self.values_[float(q)] = vals
        return self

    def predict_quantiles(self, X: np.ndarray) -> dict[float, np.ndarray]:
        cells = cell_index(self.axes, np.asarray(X, dtype=float))
        return {q: v[cells] for q, v in self.values_.items()}
