"""The median a drift test compares against, for a cost table.

A cost table answers between grid points by *rounding up* (safe for planning), so
its P50 over-predicts an iteration that falls between grid points, by as much as
the grid is coarse (10% and more). Testing ``log(actual / P50)`` against that
would read the rounding as a speed-up. The drift tests therefore use the
table's P50 *interpolated* (multilinear over ``n_decode, ctx, prefix, chunk``),
and leave queries outside the grid out: there the table clamps, and a miss
means "calibrate further", not "the device drifted" (an axis calibrated at one
value only, e.g. ``ctx = 0``, is one the table declares flat: it bounds
nothing). The tail test keeps the
table's own bound ``P99 + δ``, the one the scheduler planned with.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import product
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

#: Axis order of a cost table's arrays.
TABLE_AXES = ("n_decode", "ctx", "prefix", "chunk")


class TableMedian:
    """Interpolated P50 of a cost table and its domain (see module doc)."""

    def __init__(self, table: Any) -> None:
        axes = table.axes
        self._axes = [tuple(float(v) for v in axes[a]) for a in TABLE_AXES]
        self._grid = np.asarray(table.values(0.5), dtype=float)
        self._flat = self._grid.ravel().tolist()
        shape = self._grid.shape
        self._strides = [int(np.prod(shape[i + 1 :])) for i in range(4)]

    def in_domain(self, n_decode: float, chunk: float, ctx: float = 0, prefix: float = 0) -> bool:
        for a, x in zip(self._axes, (n_decode, ctx, prefix, chunk), strict=True):
            if len(a) > 1 and not a[0] <= x <= a[-1]:
                return False
        return True

    def domain_mask(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        ok = np.ones(np.broadcast(n_decode, chunk, ctx, prefix).shape, dtype=bool)
        for a, x in zip(self._axes, (n_decode, ctx, prefix, chunk), strict=True):
            if len(a) > 1:
                x = np.asarray(x, dtype=float)
                ok &= (x >= a[0]) & (x <= a[-1])
        return ok

    def __call__(self, n_decode: float, chunk: float, ctx: float = 0, prefix: float = 0) -> float:
        """Scalar median (plain Python: the engine asks every iteration)."""
        corners: list[list[tuple[int, float]]] = []
        point = (n_decode, ctx, prefix, chunk)
        for a, x, stride in zip(self._axes, point, self._strides, strict=True):
            i = min(max(bisect_right(a, x) - 1, 0), len(a) - 1)
            if i == len(a) - 1 or x <= a[i]:
                corners.append([(i * stride, 1.0)])
                continue
            w = (x - a[i]) / (a[i + 1] - a[i])
            corners.append([(i * stride, 1.0 - w), ((i + 1) * stride, w)])
        total = 0.0
        for combo in product(*corners):
            weight = 1.0
            flat = 0
            for off, wt in combo:
                flat += off
                weight *= wt
            total += weight * self._flat[flat]
        return total

    def many(
        self, n_decode: ArrayLike, chunk: ArrayLike, ctx: ArrayLike = 0, prefix: ArrayLike = 0
    ) -> np.ndarray:
        """Vectorised median (clamped to the grid outside it)."""
        shape = np.broadcast(n_decode, chunk, ctx, prefix).shape
        idx, wts = [], []
        for a, x in zip(self._axes, (n_decode, ctx, prefix, chunk), strict=True):
            arr = np.asarray(a)
            x = np.clip(np.broadcast_to(np.asarray(x, dtype=float), shape), arr[0], arr[-1])
            if arr.size == 1:
                i = np.zeros(shape, dtype=int)
                idx.append((i, i))
                wts.append(np.zeros(shape))
                continue
            i = np.clip(np.searchsorted(arr, x, side="right") - 1, 0, arr.size - 2)
            w = (x - arr[i]) / (arr[i + 1] - arr[i])
            idx.append((i, i + 1))
            wts.append(w)
        out = np.zeros(shape)
        for bits in product((0, 1), repeat=4):
            weight = np.ones(shape)
            for axis, b in enumerate(bits):
                weight = weight * (wts[axis] if b else 1.0 - wts[axis])
            cell = tuple(idx[axis][b] for axis, b in enumerate(bits))
            out += weight * self._grid[cell]
        return out


def reference_for(predictor: Any) -> TableMedian | None:
    """A :class:`TableMedian` for a cost table (anything with ``axes`` and ``values``)."""
    if hasattr(predictor, "axes") and callable(getattr(predictor, "values", None)):
        try:
            predictor.values(0.5)
        except (KeyError, ValueError):  # a table without a P50: use its predictions
            return None
        return TableMedian(predictor)
    return None
