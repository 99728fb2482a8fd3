"""Multilinear interpolation on a cost-table grid (the ``"linear"`` between rule).

A query ``(n_decode, ctx, prefix, chunk)`` lies in one grid box; its value is the
weighted sum of the box's corners, each weight the product of ``1 − t`` or ``t`` per
axis (``t`` the query's fraction of the way along that axis's interval). On an axis
where the query sits on a grid value (or the axis has one value) only one side
counts, so a query on grid points reads the stored value exactly. Outside the grid
each coordinate is clamped to the edge (``out`` says so).

**The order of the arithmetic** (one order, everywhere: the scalar path, ``max_chunk``
and the vectorised :meth:`Multilinear.many` give the same floats bit for bit):

1. *rows*: blend the chunk rows of the (one or two) ``n_decode`` sides,
   ``R = 0 + (1 − t_n)·V_lo + t_n·V_hi``, column by column, for each (ctx, prefix)
   side pair;
2. *chunk*: on each blended row, ``R[k] + t_c·(R[k+1] − R[k])``;
3. *sum*: over the (ctx, prefix) side pairs, ctx outer, each weighted by
   ``w_ctx·w_prefix``, accumulated from 0.

Why this keeps the table's promises: the grids are non-decreasing along every
axis and every weight is non-negative, so the interpolated value is
non-decreasing in every coordinate too. Along the chunk this holds exactly in
floating point as well (each blended row is non-decreasing, ``lo + t·(hi − lo)`` is
monotone in ``t``, and the pairs' weights are fixed), which ``max_chunk`` relies on;
along the other axes the weights ``1 − t, t`` trade off, so it holds to within
rounding.

**Why this order: speed.** The engine and the vLLM plug-in ask the scalar path every
step with the decodes' *mean* context, which is a new number almost every time, so
nothing keyed on the whole query is ever reused. ``n_decode`` and the prefix repeat,
though, so step 1's rows are cached per ``(n_decode, row)`` (:class:`BlendedGrid`):
a query then costs a bisection on ctx, a dictionary look-up per side pair and a few
multiply-adds, and ``max_chunk`` bisects a row of column values instead of
re-blending up to eight corners at every probe.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import product

import numpy as np
from numpy.typing import ArrayLike

#: Entries kept per cache (axis sides, blended rows); a cache is cleared when full.
CACHE_SIZE = 4096

#: One axis's ``(offset, weight)`` pairs: one pair on a grid value, two between.
Sides = tuple[tuple[int, float], ...]
#: Blended chunk rows and their weights (step 3 of the module docstring).
WeightedRows = list[tuple[float, list[float]]]


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


def value(rows: WeightedRows, k: int, t: float) -> float:
    """Steps 2 and 3: the weighted rows at chunk column ``k`` plus ``t`` of the way to
    ``k + 1``."""
    total = 0.0
    if t == 0.0:
        for w, row in rows:
            total += w * row[k]
    else:
        for w, row in rows:
            lo = row[k]
            total += w * (lo + t * (row[k + 1] - lo))
    return total


class BlendedGrid:
    """One flat grid's chunk rows blended over ``n_decode`` (step 1), cached per
    ``n_decode`` value: a list of rows indexed by (ctx, prefix) cell, filled on use."""

    __slots__ = ("values", "width", "cells", "_by_n")

    def __init__(self, values: Sequence[float], width: int, cells: int) -> None:
        self.values = values
        self.width = width
        self.cells = cells  # (ctx, prefix) cells: rows per n_decode side
        self._by_n: dict[float, list[list[float] | None]] = {}

    def rows(self, n: float, n_sides: Sides, pairs: Sides) -> WeightedRows:
        """The blended rows of the (ctx, prefix) cells in ``pairs`` with their weights."""
        rows = self._by_n.get(n)
        if rows is None:
            if len(self._by_n) >= CACHE_SIZE:
                self._by_n.clear()
            rows = self._by_n[n] = [None] * self.cells
        return [(w, rows[cell] or self._blend(rows, n_sides, cell)) for cell, w in pairs]

    def _blend(self, rows: list[list[float] | None], n_sides: Sides, cell: int) -> list[float]:
        values, width = self.values, self.width
        row = [0.0] * width
        for base, w in n_sides:
            start = base + cell * width
            row = [s + w * x for s, x in zip(row, values[start : start + width], strict=True)]
        rows[cell] = row
        return row


class Multilinear:
    """Positions and weights of queries on one grid; axes in storage order, chunk last."""

    def __init__(self, axes: Sequence[Sequence[float]]) -> None:
        self.axes = [[float(v) for v in a] for a in axes]
        self.shape = tuple(len(a) for a in self.axes)
        self.strides = [int(np.prod(self.shape[k + 1 :])) for k in range(len(self.shape))]
        self._n_sides: dict[float, tuple[Sides, bool]] = {}  # n_decode repeats; ctx rarely
        self._last: tuple[float, float, float, Sides, Sides, bool] | None = None

    def grid(self, values: Sequence[float]) -> BlendedGrid:
        """A flat grid (C order over the axes) ready for scalar queries."""
        return BlendedGrid(values, self.shape[3], self.shape[1] * self.shape[2])

    @staticmethod
    def _sides(axis: Sequence[float], x: float, stride: int) -> tuple[Sides, bool]:
        """:func:`axis_position` as (offset, weight) pairs (inlined: a call per axis
        per query is a noticeable share of a scalar query)."""
        if x <= axis[0]:
            return ((0, 1.0),), x < axis[0]
        last = len(axis) - 1
        if x >= axis[last]:
            return ((last * stride, 1.0),), x > axis[last]
        i = bisect_right(axis, x) - 1
        lo = axis[i]
        if x == lo:
            return ((i * stride, 1.0),), False
        t = (x - lo) / (axis[i + 1] - lo)
        return ((i * stride, 1.0 - t), ((i + 1) * stride, t)), False

    def weights(self, n: float, ctx: float, prefix: float) -> tuple[Sides, Sides, bool]:
        """``(n_decode sides, (ctx, prefix) pairs, out)``: the flat offsets and weights
        of step 1, the (ctx, prefix) cells (``ctx index · |prefix| + prefix index``) and
        weights of step 3, and whether any coordinate was clamped. The last query's
        answer is kept (``max_chunk`` and the ``predict`` calls after it share it)."""
        last = self._last
        if last is not None and last[0] == n and last[1] == ctx and last[2] == prefix:
            return last[3], last[4], last[5]
        a = self._n_sides.get(n)
        if a is None:
            if len(self._n_sides) >= CACHE_SIZE:
                self._n_sides.clear()
            a = self._n_sides[n] = self._sides(self.axes[0], n, self.strides[0])
        b, out_b = self._sides(self.axes[1], ctx, self.shape[2])
        c, out_c = self._sides(self.axes[2], prefix, 1)
        pairs = tuple([(y + z, wy * wz) for y, wy in b for z, wz in c])
        out = a[1] or out_b or out_c
        self._last = (n, ctx, prefix, a[0], pairs, out)
        return a[0], pairs, out

    def chunk_position(self, chunk: float) -> tuple[int, float, bool]:
        return axis_position(self.axes[3], chunk)

    def at(self, grid: BlendedGrid, n: float, chunk: float, ctx: float, prefix: float) -> float:
        """One scalar value of ``grid`` (clamped silently; see :meth:`weights`)."""
        n_sides, pairs, _ = self.weights(n, ctx, prefix)
        k, t, _ = axis_position(self.axes[3], chunk)
        return value(grid.rows(n, n_sides, pairs), k, t)

    def many(
        self,
        grid: np.ndarray,
        n_decode: ArrayLike,
        chunk: ArrayLike,
        ctx: ArrayLike = 0,
        prefix: ArrayLike = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised: interpolated ``grid`` values of the queries, and which were clamped.

        The same float operations in the same order as the scalar path (the module
        docstring's three steps; a side of weight 0 adds exactly 0), so each element
        equals the scalar answer bit for bit.
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
        s0, s1, s2 = self.strides[:3]
        n_lo, n_hi = lows[0] * s0, highs[0] * s0
        w_lo, w_hi = 1.0 - fracs[0], fracs[0]
        k, kh, tc = lows[3], highs[3], fracs[3]
        result = np.zeros(shape)
        for b_ctx, b_prefix in product((0, 1), repeat=2):
            offset = (highs[1] if b_ctx else lows[1]) * s1
            offset = offset + (highs[2] if b_prefix else lows[2]) * s2
            w_ctx = fracs[1] if b_ctx else 1.0 - fracs[1]
            weight = w_ctx * (fracs[2] if b_prefix else 1.0 - fracs[2])
            # step 1 at columns k and k + 1, then step 2
            lo = 0.0 + w_lo * flat[n_lo + offset + k] + w_hi * flat[n_hi + offset + k]
            hi = 0.0 + w_lo * flat[n_lo + offset + kh] + w_hi * flat[n_hi + offset + kh]
            result = result + weight * (lo + tc * (hi - lo))
        return result, out
