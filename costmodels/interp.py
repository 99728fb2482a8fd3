"""Multilinear interpolation on a cost-table grid (the ``"linear"`` between rule).

A query ``(n_decode, ctx, prefix, chunk)`` lies in one grid box; its value is the
weighted sum of the box's corners, each weight the product of ``1 − t`` or ``t`` per
axis (``t`` the query's fraction of the way along that axis's interval). On an axis
where the query sits on a grid value (or the axis has one value) only one side
counts, so a query on grid points reads the stored value exactly. Outside the grid
each coordinate is clamped to the edge (``out`` says so).

Why this keeps the table's promises: the grids are non-decreasing along every
axis, and every corner weight is non-negative, so the interpolated value is
non-decreasing in every coordinate too. Along the chunk this holds exactly in
floating point as well (each corner's row is ``lo + t·(hi − lo)``, monotone in
``t``, and the corners' weights are fixed), which ``max_chunk`` relies on; along the
other axes the weights ``1 − t, t`` trade off, so it holds to within rounding.

The scalar path is plain Python (the engine asks every iteration): the corners of
``(n_decode, ctx, prefix)`` are cached, and the chunk axis, contiguous in storage,
is interpolated last so that :meth:`value` and a ``max_chunk`` row share their
arithmetic exactly.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import product

import numpy as np
from numpy.typing import ArrayLike

#: Corner lists kept per (n_decode, ctx, prefix); cleared when it grows past this.
CACHE_SIZE = 4096

Corners = tuple[tuple[int, float], ...]


def axis_position(axis: Sequence[float], x: float) -> tuple[int, float, bool]:
    """``(i, t, out)``: ``x`` lies ``t`` of the way from ``axis[i]`` to ``axis[i + 1]``
    (``t = 0`` on a grid value or past an edge, where ``out`` is true)."""
    if x <= axis[0]:
        return 0, 0.0, x < axis[0]
    last = len(axis) - 1
    if x >= axis[last]:
        return last, 0.0, x > axis[last]
    i = bisect_right(axis, x) - 1
    lo = axis[i]
    return i, 0.0 if x == lo else (x - lo) / (axis[i + 1] - lo), False


class Multilinear:
    """Corners and weights of queries on one grid; axes in storage order, chunk last."""

    def __init__(self, axes: Sequence[Sequence[float]]) -> None:
        self.axes = [[float(v) for v in a] for a in axes]
        self.shape = tuple(len(a) for a in self.axes)
        self.strides = [int(np.prod(self.shape[k + 1 :])) for k in range(len(self.shape))]
        self._cache: dict[tuple[float, float, float], tuple[Corners, bool]] = {}

    def row_corners(self, n: float, ctx: float, prefix: float) -> tuple[Corners, bool]:
        """Start offsets of the chunk rows to blend and their weights; ``out`` if clamped."""
        key = (n, ctx, prefix)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        parts: list[list[tuple[int, float]]] = []
        out = False
        for axis, x, stride in zip(self.axes[:3], key, self.strides[:3], strict=True):
            i, t, o = axis_position(axis, x)
            out = out or o
            if t == 0.0:
                parts.append([(i * stride, 1.0)])
            else:
                parts.append([(i * stride, 1.0 - t), ((i + 1) * stride, t)])
        corners = tuple((a[0] + b[0] + c[0], a[1] * b[1] * c[1]) for a, b, c in product(*parts))
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (corners, out)
        return corners, out

    def chunk_position(self, chunk: float) -> tuple[int, float, bool]:
        return axis_position(self.axes[3], chunk)

    @staticmethod
    def value(values: Sequence[float], corners: Corners, k: int, t: float) -> float:
        """The blend of ``corners`` at chunk column ``k`` plus ``t`` of the way to ``k + 1``."""
        total = 0.0
        if t == 0.0:
            for base, w in corners:
                total += w * values[base + k]
        else:
            for base, w in corners:
                lo = values[base + k]
                total += w * (lo + t * (values[base + k + 1] - lo))
        return total

    def many(
        self,
        grid: np.ndarray,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: interpolated ``grid`` values of the queries, and which were clamped.

        The same float operations in the same order as :meth:`row_corners` and
        :meth:`value` (a corner of weight 0 adds exactly 0), so each element equals
        the scalar answer bit for bit.
        """
        xs = np.broadcast_arrays(
            *(np.asarray(x, dtype=float) for x in (n_decode, ctx, prefix, chunk))
        )
        shape = xs[0].shape
        out = np.zeros(shape, dtype=bool)
        lows, highs, fracs = [], [], []
        for axis, x in zip(self.axes, xs, strict=True):
            a = np.asarray(axis)
            out |= (x < a[0]) | (x > a[-1])
            x = np.clip(x, a[0], a[-1])
            i = np.clip(np.searchsorted(a, x, side="right") - 1, 0, a.size - 1)
            j = np.minimum(i + 1, a.size - 1)
            with np.errstate(invalid="ignore", divide="ignore"):
                t = np.where(j > i, (x - a[i]) / (a[j] - a[i]), 0.0)
            lows.append(i)
            highs.append(j)
            fracs.append(np.where(x == a[i], 0.0, t))
        flat = np.asarray(grid, dtype=float).reshape(-1)
        k, kh, tc = lows[3], highs[3], fracs[3]
        result = np.zeros(shape)
        for bits in product((0, 1), repeat=3):
            weight = None
            base = np.zeros(shape, dtype=np.int64)
            for axis, b in enumerate(bits):
                w = fracs[axis] if b else 1.0 - fracs[axis]
                weight = w if weight is None else weight * w
                base = base + (highs[axis] if b else lows[axis]) * self.strides[axis]
            lo = flat[base + k]
            result = result + weight * (lo + tc * (flat[base + kh] - lo))
        return result, out
